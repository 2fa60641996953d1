"""The body of `zero profile` (its arguments: _arguments.py, so building the parser imports no torch)."""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

from zero_plugins import AttentionKind, CommandResult, ZeroError, check_output_path, replace_file

from zero_plugins.ds_config import IgnoredConfigKeysWarning, ZeroConfig, load_config, read_config_file
from ._html import profile_html
from ._models import hidden_width, max_positions, model_config, transformers_config
from ..accelerator import get_accelerator, host_memory_available, host_memory_bytes
from ._attention import check_attention
from ._dry import traced_ranks
from ._estimator import check_settings
from ._precheck import check_host_memory, initialize_each_setting
from ._request import DryRunTarget, ProfileRequest, Setting
from ._run import run_profile
from ._text import profile_text

# Without --ds-config: bf16 AdamW, DeepSpeed's defaults for the rest.
DEFAULT_DS_CONFIG: dict[str, Any] = {
    "bf16": {"enabled": True},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
    "zero_optimization": {"stage": 2},
}


# DeepSpeed reads the block into deepspeed.checkpointing and turns no checkpointing on; zero's twin is
# zero_core.checkpointing, which the profiled Hugging Face model never calls.
_ACTIVATION_BLOCK_NOTE = (
    "the ds_config's activation_checkpointing block configures zero_core.checkpointing (DeepSpeed's "
    "deepspeed.checkpointing), which the profiled model does not call: with --gradient-checkpointing its layers "
    "are checkpointed through torch.utils.checkpoint, so the block changes no figure here, measured or estimated")
MAX_DRY_RUN_RANKS = 65536
DEFAULT_DEVICE_MEMORY = 80 << 30  # an 80 GB A100 or H100


class ProfileArgumentError(ZeroError, ValueError):
    """A `zero profile` argument out of range; the message names the flag and the bound."""


def profile_command(args: argparse.Namespace) -> CommandResult:
    if args.html:
        check_output_path(args.html, "--html")  # before the run, not in a traceback at its end
    request = request_from_args(args)
    report = run_profile(request)
    if args.html:
        replace_file(args.html, profile_html(report).encode("utf-8"))  # a link at --html is replaced, not followed
    text = profile_text(report) + (f"\nwrote {args.html}" if args.html else "")
    return CommandResult(report, text)


def request_from_args(args: argparse.Namespace) -> ProfileRequest:
    config = model_config(args.model)
    ds_config = read_config_file(Path(args.ds_config)) if args.ds_config else dict(DEFAULT_DS_CONFIG)
    base = _checked(ds_config)  # its values are read below: their types are checked first
    notes = [] if args.ds_config else ["no --ds-config: bf16, AdamW (lr 1e-4), DeepSpeed's defaults otherwise"]
    if base.optimizer is None:  # the training script passes its own to initialize, as DeepSpeed-Chat's does
        ds_config = {**ds_config, "optimizer": DEFAULT_DS_CONFIG["optimizer"]}
        notes.append("the ds_config has no optimizer block (its training script passes one to initialize): "
                     "profiled with AdamW (lr 1e-4)")
    if base.activation_checkpointing is not None:
        notes.append(_ACTIVATION_BLOCK_NOTE)
    nproc = _bounded(args.nproc, "--nproc", 1, MAX_DRY_RUN_RANKS if args.dry_run else 8)
    dry_run = _dry_run_target(args, base, nproc)
    given = args.micro_batch if args.micro_batch is not None else base.train_micro_batch_size_per_gpu or 1
    micro_batch = _bounded(given, "--micro-batch", 1, 1024)
    limit = max_positions(config) or 1 << 20
    seq_len = _bounded(args.seq_len, "--seq-len", 1, limit)
    stages = [base.zero_optimization.stage] if args.stages is None else \
        [_bounded(_integer(s, "--stages"), "--stages", 0, 3) for s in args.stages.split(",")]
    lora_rank = None if args.lora_rank is None else \
        _bounded(args.lora_rank, "--lora-rank", 1, hidden_width(config, args.model))
    choices = {"true": (True,), "false": (False,), "both": (False, True), None: (None,)}[args.memory_efficient_linear]
    settings = tuple(Setting(stage, flag if stage == 3 else None) for stage in stages for flag in
                     (choices if stage == 3 else (None,)))
    request = ProfileRequest(args.model, config, ds_config, settings, nproc, micro_batch, seq_len,
                             _bounded(args.steps, "--steps", 1, 1000), lora_rank,
                             gradient_checkpointing=bool(args.gradient_checkpointing),
                             attention=AttentionKind(args.attention),
                             timeout=_bounded_number(args.timeout, "--timeout", 1.0, 86400.0, "seconds"),
                             notes=tuple(notes), dry_run=dry_run)
    device = dry_run.device if dry_run is not None else get_accelerator().device().type
    check_attention(request.attention, device, request.precision, dry_run=dry_run is not None)
    for setting in settings:  # a bad config fails here, in one line, not on every rank
        load_config(request.config_for(setting), world_size=nproc)
    check_settings(request)  # so does a setting the estimate refuses, before any stage is traced
    if dry_run is not None:
        initialize_each_setting(request)  # and one initialize refuses (a real run's ranks each find it in seconds)
    transformers_config(config)  # so does a model transformers refuses, before any rank starts or anything prints
    if dry_run is None:  # and a model whose ranks cannot fit in this host's memory (a dry run needs none)
        check_host_memory(request, device, host_memory_available())
    return request


def _dry_run_target(args: argparse.Namespace, base: ZeroConfig, nproc: int) -> DryRunTarget | None:
    if not args.dry_run:
        if args.device is not None or args.device_memory is not None:
            raise ProfileArgumentError("--device and --device-memory describe the device a dry run stands for; add "
                                       "--dry-run, or leave them out (a real run uses this machine's accelerator)")
        return None
    zero = base.zero_optimization
    for key, block in (("offload_optimizer", zero.offload_optimizer), ("offload_param", zero.offload_param)):
        if block is not None and block.device == "nvme":
            raise ProfileArgumentError(f"--dry-run: zero_optimization.{key}.device is nvme, whose swap files a dry "
                                       "run cannot write from fake tensors; profile NVMe offload with a real run, or "
                                       "dry-run with device cpu to see the device side")
    device = args.device or "cuda"
    if args.device_memory is None:
        total = DEFAULT_DEVICE_MEMORY if device == "cuda" else host_memory_bytes()
    else:
        total = int(_bounded_number(args.device_memory, "--device-memory", 0.125, 1 << 20, "GiB") * (1 << 30))
    return DryRunTarget(device, total, traced_ranks(nproc))


def _checked(ds_config: dict[str, Any]) -> ZeroConfig:
    # Its ignored keys are warned about once per setting, when each is checked in request_from_args; so is
    # step_in_backward, which needs the stage that --stages sets for each setting.
    zero = ds_config.get("zero_optimization")
    if isinstance(zero, dict) and "step_in_backward" in zero:
        ds_config = {**ds_config, "zero_optimization": {k: v for k, v in zero.items() if k != "step_in_backward"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IgnoredConfigKeysWarning)
        return load_config(ds_config)


def _integer(value: str, flag: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ProfileArgumentError(f"{flag}: {value!r} is not a whole number") from None


def _bounded_number(value: float, flag: str, low: float, high: float, unit: str) -> float:
    if not low <= value <= high:  # also refuses nan
        raise ProfileArgumentError(f"{flag} {value:g} is out of range; pass {low:g} to {high:g} {unit}")
    return value


def _bounded(value: int, flag: str, low: int, high: int) -> int:
    if not low <= value <= high:
        raise ProfileArgumentError(f"{flag} {value} is out of range; pass {low} to {high}")
    return value
