"""What the *_vs_peers benches share on a rank: model, tokens, measurement, zero/DeepSpeed/torch steps, ledger."""
from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

import zero_core
from zero_core import StorageTracker, get_accelerator

MiB = 1024 * 1024
LR = 3e-4  # AdamW, without weight decay, in every framework
CLIP = 1.0  # gradient clipping, in every framework
Step = Callable[[torch.Tensor], torch.Tensor]
Runner = Callable[[argparse.Namespace, list[torch.Tensor]], dict[str, Any]]
PerRank = list[dict[str, dict[str, Any]]]  # per rank: framework -> its results
ConfigFor = Callable[[argparse.Namespace, int], dict[str, Any]]  # (args, world size) -> ds_config


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=12, help="steps per framework (the first 2 are not timed)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=2)


def make_model(args: argparse.Namespace) -> torch.nn.Module:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                           num_attention_heads=8, intermediate_size=4 * args.hidden,
                           max_position_embeddings=args.seq, attn_implementation="eager")
    torch.manual_seed(0)
    return GPTNeoXForCausalLM(config)


def base_ds_config(args: argparse.Namespace, world_size: int, bf16: bool) -> dict[str, Any]:
    """The ds_config keys every bench shares: batch sizes, clipping, precision, torch's AdamW (as torch_step's)."""
    return {
        "train_micro_batch_size_per_gpu": args.micro_batch,
        "train_batch_size": args.micro_batch * world_size,
        "gradient_clipping": CLIP,
        "bf16": {"enabled": bf16},
        "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": 0.0, "torch_adam": True}},
    }


def count_params(args: argparse.Namespace) -> int:
    return sum(p.numel() for p in make_model(args).parameters())


def batches(args: argparse.Namespace, rank: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + rank)
    return [torch.randint(0, args.vocab, (args.micro_batch, args.seq), generator=generator) for _ in range(args.steps)]


def measure(build: Callable[[], Step], data: list[torch.Tensor],
            after_tracked: Callable[[], dict[str, Any]] = dict, allocator_peak: bool = False) -> dict[str, Any]:
    """Build and take two steps inside a StorageTracker, then time the rest untracked; `allocator_peak`: also
    the counted CPU allocator's peak over the build and every step (nothing may reset it meanwhile)."""
    accelerator = get_accelerator()
    gc.collect()
    accelerator.reset_peak_memory_stats()
    rss_start = accelerator.memory_reserved()
    _OPTIMIZER_STEPS.clear()
    losses = []
    with StorageTracker() as tracker:
        step = build()
        for batch in data[:2]:
            losses.append(step(batch))
    result: dict[str, Any] = {"peak_tensor_bytes": tracker.peak_bytes("cpu"), **after_tracked()}
    times = []
    for batch in data[2:]:
        start = time.perf_counter()
        losses.append(step(batch))
        times.append(time.perf_counter() - start)
    result.update(
        losses=[_global_mean(loss) for loss in losses],
        step_seconds=sum(times) / len(times),
        step_times=times,
        peak_rss_bytes=accelerator.max_memory_reserved(),
        rss_rise_bytes=accelerator.max_memory_reserved() - rss_start,
    )
    if len(_OPTIMIZER_STEPS) == len(data):  # an engine's step: the optimizer's share of each timed step
        result["optimizer_step_times"] = _OPTIMIZER_STEPS[2:]
    if allocator_peak:
        result["allocator_peak_bytes"] = accelerator.max_memory_allocated()
    return result


def _global_mean(loss: torch.Tensor) -> float:
    value = loss.detach().float().clone()
    dist.all_reduce(value)
    return value.item() / dist.get_world_size()


# Seconds of each engine.step() call since measure() began: benches that split a step into forward and backward
# and the optimizer's step read them (measure's `optimizer_step_times`).
_OPTIMIZER_STEPS: list[float] = []


def _engine_step(engine: Any, batch: torch.Tensor) -> torch.Tensor:
    loss = engine(input_ids=batch, labels=batch).loss
    engine.backward(loss)
    start = time.perf_counter()
    engine.step()
    _OPTIMIZER_STEPS.append(time.perf_counter() - start)
    return loss


def _run_zero(args: argparse.Namespace, config: dict[str, Any], data: list[torch.Tensor],
              counted: bool = False) -> dict[str, Any]:
    """zero with `config`, and its ledger's peaks (total and by category) over the tracked part. `counted`: the
    CPU allocator is counted from before the build, and its peak is measured instead of tracking (the ledger's
    phases would reset it); the ledger's peaks are then those of what the engine registers."""
    holder: dict[str, Any] = {}

    def build() -> Step:
        model = make_model(args)
        if config["bf16"]["enabled"]:
            # DeepSpeed casts the model to bf16 before it takes its fp32 master; start from the same weights
            model = model.to(torch.bfloat16)
        engine, _, _, _ = zero_core.initialize(model=model, config=config)
        engine.track_memory(not counted)
        holder["engine"] = engine
        return lambda batch: _engine_step(engine, batch)

    def ledger() -> dict[str, Any]:
        engine = holder["engine"]
        engine.track_memory(False)
        report = engine.memory_report()
        peaks = {where: {category: figures["peak"] for category, figures in rows.items()}
                 for where, rows in report.items()}
        # "cpu" is the device; offloaded copies are at "host"/"host.pinned", though on CPU it is the same RAM
        return {"ledger_peak_bytes": peaks["cpu"]["total"], "ledger": peaks["cpu"], "ledger_by_location": peaks}

    result = measure(build, data, ledger, allocator_peak=counted)
    holder["engine"].destroy()
    return result


def _run_deepspeed(args: argparse.Namespace, config: dict[str, Any], data: list[torch.Tensor]) -> dict[str, Any]:
    import deepspeed

    def build() -> Step:
        model = make_model(args)
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
        return lambda batch: _engine_step(engine, batch)

    return measure(build, data)


def zero_counted(ds_config: ConfigFor) -> Runner:
    """zero with the CPU allocator counted from before the model is built (zero_pin's exact count), so the
    result's `allocator_peak_bytes` is the peak over the build and every step; the ledger does not track."""

    def run(args: argparse.Namespace, data: list[torch.Tensor]) -> dict[str, Any]:
        get_accelerator().count_allocations()
        return _run_zero(args, ds_config(args, dist.get_world_size()), data, counted=True)

    return run


def zero_and_deepspeed(ds_config: ConfigFor) -> dict[str, Runner]:
    """The runners of zero and DeepSpeed, both with the same ds_config."""
    return {
        "zero": lambda args, data: _run_zero(args, ds_config(args, dist.get_world_size()), data),
        "deepspeed": lambda args, data: _run_deepspeed(args, ds_config(args, dist.get_world_size()), data),
    }


def run_fsdp2(args: argparse.Namespace, data: list[torch.Tensor], offload: bool = False) -> dict[str, Any]:
    """FSDP2: `fully_shard` on every transformer layer and on the root over a CPU mesh (gloo), bf16 compute,
    torch's AdamW on the fp32 shards; with `offload`, CPUOffloadPolicy (params, grads and AdamW on the host)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    def build() -> Step:
        model = make_model(args)
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
        # pin_memory needs an accelerator; this CPU build of torch has none to pin for
        placement = CPUOffloadPolicy(pin_memory=False) if offload else OffloadPolicy()
        for layer in model.gpt_neox.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy, offload_policy=placement)
        fully_shard(model, mesh=mesh, mp_policy=policy, offload_policy=placement)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
        return torch_step(model, optimizer, autocast=False)  # FSDP2's MixedPrecisionPolicy does the casting

    return measure(build, data)


def torch_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, autocast: bool) -> Step:
    """A plain-torch training step (bf16 autocast if asked), clipping at CLIP as the ds_configs do."""

    def step(batch: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


def print_table_head(args: argparse.Namespace, per_rank: PerRank, setting: str, header: str) -> None:
    """What ran (model size, `setting`, ranks, batch, steps), then the table's header and rule."""
    print(f"\nGPT-NeoX {count_params(args) / 1e6:.2f}M params, {setting}, {len(per_rank)} ranks, "
          f"micro-batch {args.micro_batch} x {args.seq} tokens, {args.steps} steps (last {args.steps - 2} timed)")
    print(header)
    print("-" * len(header))


def print_ledger(per_rank: PerRank) -> bool:
    """Print whether zero's ledger peak equals the tracker's on every rank (returned), and rank 0's peaks by category."""
    exact = all(r["zero"]["ledger_peak_bytes"] == r["zero"]["peak_tensor_bytes"] for r in per_rank)
    print(f"zero's ledger peak {'equals' if exact else 'DIFFERS FROM'} the storage tracker's on every rank")
    print("\nzero ledger peaks by category (rank 0):")
    for category, peak in per_rank[0]["zero"]["ledger"].items():
        print(f"  {category:<20}{peak / MiB:>10.2f} MiB")
    return exact
