"""Text of `zero estimate`: the per-phase table, the breakdown by category, and --explain."""
from __future__ import annotations

import re
from collections.abc import Sequence

from zero_plugins import format_table

from ._estimate import Estimate
from ._levers import dominates_text
from ._settings import Training
from zero_plugins import Category

from ._lines import LOCATIONS, PHASES
from ._units import gib, human_count

SYMBOLS = {
    "P": "params in the model",
    "T": "trainable params",
    "N": "GPUs in all (data-parallel world size)",
    "S": "elements of this rank's optimizer shards, each padded to N: one per reduce bucket (stages 1-2), "
    "per unit and per small-param bucket (stage 3)",
    "Si": "one of those shards: a buffer of its own",
    "K": "how many shards S is made of: fp32 master tensors, each with a step count",
    "U": "elements of this rank's 16-bit param shards at stage 3, each padded to N: one per module unit",
    "Uc": "elements of the 16-bit shards kept in host memory with NVMe: units in module order while their sum "
    "stays within offload_param.max_in_cpu",
    "Un": "elements of the 16-bit shards in swap files: every unit from the first past max_in_cpu on",
    "Ui": "one 16-bit unit shard: a buffer, or with NVMe a swap file, of its own",
    "Gi": "one optimizer swap slice with NVMe: a piece of at most min(SG, ceil(T/N), SL) elements of a shard Si; "
    "its master and each state tensor are a swap file",
    "KG": "how many swap slices there are: each keeps a step count in host memory",
    "SL": "the swap slice the NVMe buffers' budget allows: nb buffers within 1/16 of the master and state, "
    "in whole aio.block_size blocks, at least one (not for Adafactor, which steps whole sub-groups)",
    "pages": "bytes rounded up to whole pages of the host (page_size): pinned memory is locked in pages",
    "blocks": "bytes rounded up to whole 4 KiB blocks: swap files and swap buffers are moved with O_DIRECT",
    "Pp": "params kept whole by stage3_param_persistence_threshold",
    "L": "params of the largest module",
    "W": "linear-layer weights whose input needs a gradient, which autograd keeps gathered",
    "ML": "stage3_max_live_parameters",
    "PF": "stage3_prefetch_bucket_size",
    "RB": "reduce_bucket_size",
    "Lb": "elements of the largest reduce bucket (stage 2) or unit (stage 3): no reduce buffer is larger",
    "SG": "sub_group_size",
    "nb": "offload buffer_count (offload_optimizer's or offload_param's)",
    "bs": "offload_param.buffer_size",
    "F": "Adafactor's factored state elements",
    "s": "sequence length",
    "b": "micro-batch size",
    "h": "hidden size",
    "a": "attention heads",
    "h_kv": "key/value width: h x num_key_value_heads / a (grouped-query attention, kept so by a fused kernel)",
    "n": "transformer layers",
    "nc": "activation checkpoints: ceil(n/k) with a checkpoint every k layers (DeepSpeed's number_checkpoints)",
    "k": "layers per activation checkpoint, rebuilt together in backward",
    "V": "vocabulary size",
}


def describe(estimate: Estimate) -> str:
    """Two lines: the model, then the hardware and the training loop."""
    model, training, cluster = estimate.model, estimate.training, estimate.cluster
    parts = [f"{model.name}: {human_count(model.total_params)} params"]
    if model.trainable_params != model.total_params:
        lora = model.lora
        how = f": LoRA rank {lora.rank} on {', '.join(lora.targets)}" if lora else ""
        parts.append(f" ({human_count(model.trainable_params)} trainable{how})")
    if model.largest_layer_params is not None:
        parts.append(f", largest layer {human_count(model.largest_layer_params)}")
    nodes = "node" if cluster.nodes == 1 else "nodes"
    gpus = "GPU" if cluster.gpus_per_node == 1 else "GPUs"
    precision = "fp32" if not training.mixed else f"{training.precision} mixed precision"
    setup = (
        f"{cluster.nodes} {nodes} x {cluster.gpus_per_node} {gpus}; {precision}, {training.optimizer}; "
        f"micro-batch {training.micro_batch} x {estimate.seq_len} tokens, gradient accumulation {training.grad_accum}; "
        f"activation checkpointing {_checkpointing_words(training)}"
        f", {training.attention} attention"
    )
    return "".join(parts) + "\n" + setup


def _checkpointing_words(training: Training) -> str:
    words = training.checkpointing
    if training.checkpointing == "full":
        words += " (every layer)" if training.checkpoint_every == 1 else f" (every {training.checkpoint_every} layers)"
        if training.cpu_checkpointing:
            words += ", inputs in pinned host memory"
    if training.offload_activations:
        words += ", the layers' saved activations in pinned host memory"
    return words


def phase_table(estimates: Sequence[Estimate]) -> str:
    rows = []
    for e in estimates:
        gpu = [gib(e.total("gpu", phase)) for phase in PHASES]
        rows.append(
            [str(e.zero.stage), e.zero.label(), *gpu, gib(e.peak("gpu")[1])]
            + [gib(e.peak(device)[1]) for device in ("cpu", "pinned", "nvme")]
        )
    headers = ["stage", "offload opt/param", *PHASES, "GPU peak", "CPU/node", "pinned", "NVMe/node"]
    return "GiB per GPU by phase; host columns are each node's peak\n" + format_table(headers, rows)


def host_table(estimates: Sequence[Estimate]) -> str:
    """The lines off the GPU, by location, pinned flag and ledger category: bytes per GPU's process."""
    columns: list[dict[tuple[str, str, str], int]] = []
    for e in estimates:
        column: dict[tuple[str, str, str], int] = {}
        for line in e.lines:
            if line.on_host:
                key = (line.location, line.category, "all" if line.phases == PHASES else ",".join(line.phases))
                column[key] = column.get(key, 0) + line.bytes
        columns.append(column)
    keys = sorted({key for column in columns for key in column}, key=_host_order)
    rows = [
        [location, "yes" if location == "host.pinned" else "no", category, phases,
         *(f"{column[key]:,}" if key in column else "" for column in columns)]
        for key in keys
        for location, category, phases in [key]
    ]
    stages = [f"stage {e.zero.stage} {e.zero.label()}" for e in estimates]
    headers = ["location", "pinned", "category", "phases", *stages]
    title = "Bytes per GPU's process off the GPU, as the engine's ledger counts them (a node holds one per GPU)"
    return title + "\n" + format_table(headers, rows)


def _host_order(key: tuple[str, str, str]) -> tuple[int, int, str]:
    location, category, phases = key
    return LOCATIONS.index(location), list(Category).index(Category(category)), phases


def category_table(estimates: Sequence[Estimate]) -> str:
    peaks = [e.peak("gpu")[0] for e in estimates]
    columns = [e.by_category("gpu", phase) for e, phase in zip(estimates, peaks)]
    rows = [
        [category, *(gib(column.get(category, 0)) for column in columns)]
        for category in Category
        if any(column.get(category) for column in columns)
    ]
    rows.append(["total", *(gib(sum(column.values())) for column in columns)])
    headers = ["category", *(f"stage {e.zero.stage} ({phase})" for e, phase in zip(estimates, peaks))]
    return "GiB per GPU by ledger category, at each stage's GPU peak\n" + format_table(headers, rows)


def notes(estimates: Sequence[Estimate]) -> list[str]:
    seen: dict[str, None] = {}
    for e in estimates:
        seen.update(dict.fromkeys(e.notes))
    return list(seen)


def explain(estimates: Sequence[Estimate]) -> str:
    """Every copy with its formula and the numbers put in, per configuration."""
    used = {symbol for e in estimates for line in e.lines for symbol in _symbols(line.formula)}
    legend = [f"  {symbol:<3} {meaning}" for symbol, meaning in SYMBOLS.items() if symbol in used]
    blocks = ["Symbols:\n" + "\n".join(legend)]
    for e in estimates:
        phase, peak = e.peak("gpu")
        out = [f"stage {e.zero.stage}, offload {e.zero.label()}: GPU peak {gib(peak)} GiB at {phase}", placement(e)]
        for line in e.lines:
            where = f"{line.location}{', pinned' if line.pinned else ''}; {' '.join(line.phases)}"
            out.append(f"  {line.category:<16} {line.what} [{where}]")
            per = "per GPU" if not line.on_host else "per process"
            figure = f"{line.formula} = {line.numbers} = {line.bytes:,} B = {gib(line.bytes)} GiB {per}"
            if line.on_host and e.cluster.gpus_per_node > 1:
                figure += f" (x {e.cluster.gpus_per_node} per node)"
            out.append(f"      {figure}")
        blocks.append("\n".join(out))
    return "\n\n".join(blocks)


def placement(e: Estimate) -> str:
    """The placement plan's copies, as the engine places them (docs/architecture.md, "The placement plan")."""
    plan = e.plan
    rows = [[row["copy"], row["dtype"], row["location"], row["lifetime"], row["extent"]] for row in plan.rows()]
    table = format_table(["copy", "dtype", "location", "lifetime", "extent"], rows)
    head = f"  placement plan: {plan.summary()}"
    return head + "\n" + "\n".join("    " + line for line in table.splitlines())


def _symbols(formula: str) -> set[str]:
    return set(re.findall(r"[A-Za-z]+", formula)) & set(SYMBOLS)


def report_text(estimates: Sequence[Estimate], *, with_explain: bool) -> str:
    parts = [describe(estimates[0]), phase_table(estimates), category_table(estimates), host_table(estimates)]
    if with_explain:
        parts.append(explain(estimates))
        parts.extend(dominates_text(e) for e in estimates)
    if notes(estimates):
        parts.append("\n".join(f"note: {note}" for note in notes(estimates)))
    return "\n\n".join(parts)
