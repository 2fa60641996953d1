"""Flags shared by `zero estimate` and `zero plan`, and turning them into estimator inputs.

Values are parsed here rather than by argparse types, so a bad value is one line naming
the flag (argparse would print the whole usage first).
"""
from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import _checks, _ds_config, _sources
from ._errors import EstimateError
from zero_plugins.model_presets import PRESETS
from ._settings import (
    ATTENTION,
    CHECKPOINTING,
    OFFLOAD_DEVICES,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PRECISION_BYTES,
    Cluster,
    Training,
    ZeroSettings,
)
from ._spec import LoraSpec, ModelSpec, TransformerShape
from ._units import parse_count

# API argument names -> the flag that sets them, so errors raised below the CLI name the flag.
FLAGS = {
    "total_params": "--params",
    "num_gpus_per_node": "--gpus",
    "num_nodes": "--nodes",
    "additional_buffer_factor": "--additional-buffer-factor",
    "largest_layer_params": "--largest-layer",
    "trainable_params": "--trainable-params",
    "gpus_per_node": "--gpus",
    "nodes": "--nodes",
    "precision": "--precision",
    "optimizer": "--optimizer",
    "optimizer_impl": "--optimizer-impl",
    "micro_batch": "--micro-batch",
    "seq_len": "--seq-len",
    "grad_accum": "--grad-accum",
    "checkpointing": "--checkpointing",
    "attention": "--attention",
    "checkpoint_every": "--checkpoint-every",
    "number_checkpoints": "--number-checkpoints",
    "cpu_checkpointing": "--cpu-checkpointing",
    "offload_activations": "--offload-activations",
    "stage": "--stage",
    "offload_optimizer": "--offload-optimizer",
    "offload_param": "--offload-param",
    "lora_rank": "--lora-rank",
    "lora_targets": "--lora-targets",
    "preset": "--preset",
    "gpu_memory": "--gpu-memory",
    "cpu_memory": "--cpu-memory",
    "nvme": "--nvme",
    "ds_config": "--ds-config",
    "verify": "--verify",
    "headroom": "--headroom",
}
# The flag -> the API argument whose bound (_checks.LIMITS) it takes. The shape flags take the bounds a
# config.json's keys take (_hf_schema.py); they are not in FLAGS, where a config key's error would take their name.
_FIELDS = {flag: field for field, flag in FLAGS.items()} | {
    "--layers": "num_layers", "--hidden-size": "hidden_size", "--heads": "num_heads", "--vocab-size": "vocab_size"}
# Integer ZeRO settings: flag -> ZeroSettings field.
_ZERO_COUNTS = {
    "--reduce-bucket-size": "reduce_bucket_size",
    "--allgather-bucket-size": "allgather_bucket_size",
    "--prefetch-bucket-size": "stage3_prefetch_bucket_size",
    "--max-live-parameters": "stage3_max_live_parameters",
    "--param-persistence-threshold": "stage3_param_persistence_threshold",
    "--sub-group-size": "sub_group_size",
    "--optimizer-buffer-count": "optimizer_buffer_count",
    "--param-buffer-count": "param_buffer_count",
    "--param-buffer-size": "param_buffer_size",
    "--max-in-cpu": "param_max_in_cpu",
}
# What each count counts, for --help, where it is not elements.
_COUNT_UNITS = {"optimizer_buffer_count": "NVMe swap buffers", "param_buffer_count": "NVMe swap buffers"}
# store_true training flags: flag -> --help.
_TRAINING_SWITCHES = {
    "--cpu-checkpointing": "full checkpointing, checkpointed inputs in pinned host memory",
    "--offload-activations":
        "what the layers save for backward in pinned host memory (offload_saved_activations); not with full",
}
# store_true ZeRO flags that turn a setting off: flag -> (ZeroSettings field, --help).
_ZERO_OFF_SWITCHES = {
    "--no-memory-efficient-linear": ("memory_efficient_linear", "stage 3: autograd keeps every gathered weight"),
    "--no-zero-init": ("zero_init", "stage 3: build the whole model on each process"),
    "--no-pin-memory": ("pin_memory", "offload buffers are pageable, not pinned"),
}


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model (one of --params, --preset, --config)")
    group.add_argument("--params", metavar="N", help="total parameter count, e.g. 6.9e9 or 6.9B")
    group.add_argument("--preset", metavar="NAME", help=f"a known model: {', '.join(sorted(PRESETS))}")
    group.add_argument("--config", metavar="PATH", help="a Hugging Face config.json, or the folder holding it")
    group.add_argument("--largest-layer", metavar="N", help="with --params: params of the largest module")
    group.add_argument("--trainable-params", metavar="N", help="with --params: how many params train (default all)")
    group.add_argument("--layers", metavar="N", help="with --params: transformer layers, for activations")
    group.add_argument("--hidden-size", metavar="N", help="with --params: hidden size, for activations")
    group.add_argument("--heads", metavar="N", help="with --params: attention heads, for activations")
    group.add_argument("--vocab-size", metavar="N", help="with --params: vocabulary size, for the logits")
    group.add_argument("--base-model", action="store_true", help="count the model without its LM head (AutoModel)")
    group.add_argument("--lora-rank", metavar="R", help="train LoRA adapters of rank R; the base model is frozen")
    group.add_argument(
        "--lora-targets", metavar="A,B", default="all-linear", help="linear layers to adapt (default all-linear)"
    )


def add_setup_arguments(parser: argparse.ArgumentParser, *, offload: bool = True) -> None:
    """--ds-config, hardware, training and ZeRO flags; `offload=False` leaves out the offload devices.

    `zero plan` tries every offload itself. Flags a ds_config also sets default to None, so a
    flag left out takes the config's value (or, without one, the Training/ZeroSettings default).
    """
    hardware = parser.add_argument_group("hardware")
    hardware.add_argument("--gpus", metavar="N", default="1", help="GPUs per node (default 1)")
    hardware.add_argument("--nodes", metavar="N", default="1", help="nodes (default 1)")
    parser.add_argument(
        "--ds-config",
        metavar="PATH",
        help="a DeepSpeed ds_config JSON for the training and ZeRO settings; flags given override it",
    )
    training = parser.add_argument_group("training")
    for flag, metavar, help_text in (
        ("--precision", "P", _one_of(PRECISION_BYTES, "bf16")),
        ("--optimizer", "NAME", _one_of(OPTIMIZERS, "adamw")),
        ("--optimizer-impl", "IMPL",
         _one_of(OPTIMIZER_IMPLS, "foreach") + ": how torch steps the master (its temporaries)"),
        ("--micro-batch", "N", "micro-batch per GPU (default 1)"),
        ("--seq-len", "N", "tokens per sample (default 2048, or the model's maximum)"),
        ("--grad-accum", "N", "gradient accumulation steps (default 1)"),
        ("--checkpointing", "MODE", _one_of(CHECKPOINTING, "none")),
        ("--attention", "KIND", _one_of(ATTENTION, "sdpa") + ": sdpa and flash keep a logsumexp per query, eager "
         "the s x s probabilities"),
        ("--checkpoint-every", "K", "full checkpointing, one checkpoint every K layers (default 1)"),
        ("--number-checkpoints", "N",
         "full checkpointing, N checkpoints over the layers (DeepSpeed's number_checkpoints): K = ceil(layers/N)"),
    ):
        training.add_argument(flag, metavar=metavar, help=help_text)
    for flag, help_text in _TRAINING_SWITCHES.items():
        training.add_argument(flag, action="store_true", help=help_text)
    zero = parser.add_argument_group("ZeRO (zero_optimization keys; DeepSpeed's defaults)")
    if offload:
        devices = _one_of(OFFLOAD_DEVICES, "none")
        zero.add_argument("--offload-optimizer", metavar="DEVICE", help=devices)
        zero.add_argument("--offload-param", metavar="DEVICE", help="none | cpu | nvme; stage 3 only")
    for flag, field in _ZERO_COUNTS.items():
        unit = _COUNT_UNITS.get(field, "elements")
        zero.add_argument(flag, metavar="N", help=f"{unit} (default {getattr(ZeroSettings, field):,})")
    zero.add_argument("--overlap-comm", action=argparse.BooleanOptionalAction, help="default: on for stage 3 only")
    for flag, (_, help_text) in _ZERO_OFF_SWITCHES.items():
        zero.add_argument(flag, action="store_true", help=help_text)
    zero.add_argument("--step-in-backward", action="store_true",
                      help="stage 3: each unit steps as its gradient is reduced (zero_optimization.step_in_backward)")


def model_from_args(args: argparse.Namespace) -> ModelSpec:
    given = [flag for flag in ("params", "preset", "config") if getattr(args, flag)]
    if len(given) != 1:
        problem = "no model given" if not given else f"{' and '.join('--' + g for g in given)} both given"
        raise EstimateError(f"{problem}; pass exactly one of --params N, --preset NAME or --config PATH")
    number_only = ("largest_layer", "trainable_params", "layers", "hidden_size", "heads", "vocab_size")
    if not args.params:
        for name in number_only:
            if getattr(args, name) is not None:
                raise EstimateError(f"--{name.replace('_', '-')} goes with --params; --{given[0]} already gives it")
    lora = None
    if args.lora_rank is not None:
        targets = tuple(t.strip() for t in args.lora_targets.split(",") if t.strip())
        lora = LoraSpec(_count(args.lora_rank, "--lora-rank"), targets)
    if args.preset:
        return _with_lora_checked(_sources.from_preset(args.preset, head=not args.base_model, lora=lora))
    if args.config:
        try:
            spec = _sources.from_hf_config(Path(args.config), head=not args.base_model, lora=lora)
        except EstimateError as error:
            if error.field is None or error.field in FLAGS:
                raise  # already names the file, or a flag of its own
            raise EstimateError(str(error), f"--config {args.config}") from None
        return _with_lora_checked(spec)
    if lora:
        needs = "LoRA needs the model's layers; use --preset or --config, or --trainable-params with --params"
        raise EstimateError(needs, "lora_rank")
    return _sources.from_numbers(
        _count(args.params, "--params"),
        _optional_count(args.largest_layer, "--largest-layer"),
        _optional_count(args.trainable_params, "--trainable-params", minimum=0),
        shape=_shape(args),
        name="model",
    )


def _with_lora_checked(spec: ModelSpec) -> ModelSpec:
    if spec.lora is not None and spec.shape is not None:
        _checks.lora_rank(spec.lora.rank, spec.shape.hidden_size, "--lora-rank")
    return spec


def _count(text: str, flag: str, *, minimum: int = 1) -> int:
    """parse_count, within the flag's upper bound (_checks.LIMITS), the error naming the flag."""
    value = parse_count(text, flag, minimum=minimum)
    try:
        _checks.at_most(value, _FIELDS.get(flag, flag))
    except EstimateError as error:
        raise EstimateError(error.reason, flag) from None
    return value


def _shape(args: argparse.Namespace) -> TransformerShape | None:
    flags = {"--layers": args.layers, "--hidden-size": args.hidden_size, "--heads": args.heads}
    if all(value is None for value in flags.values()):
        if args.vocab_size is not None:
            raise EstimateError("--vocab-size needs --layers, --hidden-size and --heads too")
        return None
    missing = [flag for flag, value in flags.items() if value is None]
    if missing:
        raise EstimateError(f"activations need {', '.join(missing)} as well as {', '.join(set(flags) - set(missing))}")
    layers, hidden, heads = (_count(value, flag) for flag, value in flags.items())
    _checks.multiple_of(("--hidden-size", hidden), ("--heads", heads))  # as a config.json's heads must
    vocab = _optional_count(args.vocab_size, "--vocab-size") or 0
    return TransformerShape(layers, hidden, heads, vocab)


def cluster_from_args(args: argparse.Namespace) -> Cluster:
    gpus, nodes = _count(args.gpus, "--gpus"), _count(args.nodes, "--nodes")
    _checks.world_size(gpus, nodes, "--nodes")
    return Cluster(gpus, nodes)


def ds_settings_from_args(args: argparse.Namespace, cluster: Cluster) -> tuple[Training, ZeroSettings] | None:
    """The training and ZeRO settings of --ds-config, before the flags override them; None without it."""
    if args.ds_config is None:
        return None
    # Refused with zero-core's own message: the config's keys and file are named in it.
    ds = _ds_config.load_ds_config(args.ds_config)
    # --seq-len and the other training flags are applied over it by training_from_args.
    return _ds_config.settings_from_ds_config(ds, cluster.world_size, checkpointing=_checkpointing(args))


def training_from_args(
    args: argparse.Namespace, model: ModelSpec | None = None, base: Training | None = None
) -> Training:
    """The training loop: `base` (from --ds-config) or the defaults, with the flags given.

    `model` gives the layer count --number-checkpoints divides.
    """
    every = _checkpoint_every(args, model)
    given: dict[str, object] = {
        "precision": _optional_choice(args.precision, "--precision", PRECISION_BYTES),
        "optimizer": _optional_choice(args.optimizer, "--optimizer", OPTIMIZERS),
        "optimizer_impl": _optional_choice(args.optimizer_impl, "--optimizer-impl", OPTIMIZER_IMPLS),
        "micro_batch": _optional_count(args.micro_batch, "--micro-batch"),
        "seq_len": _optional_count(args.seq_len, "--seq-len"),
        "grad_accum": _optional_count(args.grad_accum, "--grad-accum"),
        "checkpointing": _checkpointing(args),
        "attention": _optional_choice(args.attention, "--attention", ATTENTION),
        "checkpoint_every": every,
        # store_true flags: left out means "as the base has it", so False is not an override.
        "cpu_checkpointing": args.cpu_checkpointing or None,
        "offload_activations": args.offload_activations or None,
    }
    overrides: dict[str, Any] = {name: value for name, value in given.items() if value is not None}
    return Training(**overrides) if base is None else replace(base, **overrides)


def _checkpointing(args: argparse.Namespace) -> str:
    """--checkpointing, or "full" where --checkpoint-every, --number-checkpoints or --cpu-checkpointing imply it."""
    if args.checkpointing is not None:
        return _checks.choice(args.checkpointing, "--checkpointing", CHECKPOINTING)
    implied = args.checkpoint_every is not None or args.number_checkpoints is not None or args.cpu_checkpointing
    return "full" if implied else "none"


def _checkpoint_every(args: argparse.Namespace, model: ModelSpec | None) -> int | None:
    if args.checkpoint_every is not None and args.number_checkpoints is not None:
        raise EstimateError("--checkpoint-every and --number-checkpoints both given; pass one of them")
    if args.checkpoint_every is not None:
        return _count(args.checkpoint_every, "--checkpoint-every")
    if args.number_checkpoints is None:
        return None
    number = _count(args.number_checkpoints, "--number-checkpoints")
    if model is None or model.shape is None:
        needs = "needs the model's layers (--preset, --config, or --layers with --params)"
        raise EstimateError(needs, "number_checkpoints")
    layers = model.shape.num_layers
    if number > layers:
        raise EstimateError(f"must be at most the model's {layers} layers (got {number})", "number_checkpoints")
    return -(-layers // number)


def zero_from_args(args: argparse.Namespace, stage: int, base: ZeroSettings | None = None) -> ZeroSettings:
    """ZeRO settings at `stage`: `base` (from --ds-config) or DeepSpeed's defaults, with the flags given."""
    overrides: dict[str, Any] = {"stage": stage}
    for flag, field in _ZERO_COUNTS.items():
        value = getattr(args, _dest(flag))
        if value is not None:
            overrides[field] = _count(value, flag, minimum=1 if field == "reduce_bucket_size" else 0)
    for flag in ("--offload-optimizer", "--offload-param"):
        field = _dest(flag)
        device = _optional_choice(getattr(args, field, None), flag, OFFLOAD_DEVICES)  # `zero plan` has no such flags
        if device is not None:
            overrides[field] = device
    if args.overlap_comm is not None:
        overrides["overlap_comm"] = args.overlap_comm
    # The --no-* flags given turn a setting off; left out, the base's value stands.
    for flag, (field, _) in _ZERO_OFF_SWITCHES.items():
        if getattr(args, _dest(flag)):
            overrides[field] = False
    if args.step_in_backward:
        overrides["step_in_backward"] = True
    return ZeroSettings(**overrides) if base is None else replace(base, **overrides)


def _dest(flag: str) -> str:
    """The attribute argparse stores `flag` in: "--no-zero-init" -> "no_zero_init"."""
    return flag[2:].replace("-", "_")


def _one_of(names: Iterable[str], default: str) -> str:
    return f"{' | '.join(names)} (default {default})"


def _optional_choice(value: str | None, flag: str, choices: Iterable[str]) -> str | None:
    return None if value is None else _checks.choice(value, flag, choices)


def _optional_count(value: str | None, flag: str, *, minimum: int = 1) -> int | None:
    return None if value is None else _count(value, flag, minimum=minimum)


def flagged(error: EstimateError) -> str:
    """The error with the API argument name replaced by the CLI flag."""
    if error.field in FLAGS:
        return f"{FLAGS[error.field]}: {error.reason}"
    return str(error)
