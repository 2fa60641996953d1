"""`zero plan --verify`: its flags, what the dry run can take, and the search wired to the report."""
from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zero_plugins import OutputPathError, check_output_path, is_link, read_config_text
from zero_plugins.model_presets import PRESETS, causal_lm_presets

from ._errors import EstimateError
from ._estimate import Estimate
from ._plan import Candidate, Limits
from ._settings import Cluster, Training, ZeroSettings
from ._spec import ModelSpec
from ._step_traffic import step_traffic
from ._verify import Budget, Outcome, dry_run_hook, search
from ._verify_cache import VerifyCache, cache_dir, cache_key
from ._verify_report import outcome_dict, verify_text
from ._verify_request import OPTIMIZER_BLOCKS, RunSettings, dry_run_request
from ._verify_search import trials

DEFAULT_HEADROOM = 0.10  # allocator fragmentation and the CUDA context (docs/plan.md, "Fits: the budget and ...")
MAX_HEADROOM = 0.5
DEFAULT_COUNT = 3
DEFAULT_STEPS = 2  # the second step's backward holds the optimizer states the first step made
DEFAULT_TIMEOUT = 900
# The flags that go with --verify: argparse's attribute -> the flag.
_VERIFY_FLAGS = {"verify_count": "--verify-count", "headroom": "--headroom", "steps": "--steps", "timeout": "--timeout",
                 "no_cache": "--no-cache"}


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("verify (the dry run of `zero profile --dry-run` traces each configuration)")
    group.add_argument("--verify", action="store_true",
                       help="trace the planned configurations with the real engine on fake tensors, in order, until "
                            "--verify-count fit; needs zero-core and --preset or --config (docs/plan.md)")
    group.add_argument("--verify-count", metavar="K",
                       help=f"configurations to verify (default {DEFAULT_COUNT})")
    group.add_argument("--headroom", metavar="FRACTION",
                       help=f"part of --gpu-memory kept free for allocator fragmentation and the CUDA context, e.g. "
                            f"0.1 or 10%% (default {DEFAULT_HEADROOM:g})")
    group.add_argument("--steps", metavar="N",
                       help=f"training steps each trace runs (default {DEFAULT_STEPS})")
    group.add_argument("--timeout", metavar="SECONDS",
                       help=f"stop one trace after this long (default {DEFAULT_TIMEOUT})")
    group.add_argument("--no-cache", action="store_true",
                       help="trace every configuration again, keeping nothing (default: reuse earlier traces)")


@dataclass(frozen=True)
class Setup:
    """What `zero plan` was given besides the model: the hardware, its limits, the training loop and ZeRO settings."""

    cluster: Cluster
    limits: Limits
    training: Training
    zero: ZeroSettings


@dataclass(frozen=True)
class Verified:
    """The search as the `--json` document's "verify", its text, and the best verified configuration (or None)."""

    data: dict[str, Any]
    text: str
    chosen: Estimate | None


def run_verify(args: argparse.Namespace, model: ModelSpec, setup: Setup, given: dict[str, Any] | None) -> Verified:
    reference, model_config = _model_reference(args)
    _check_traceable(model, setup, given)
    limits = setup.limits
    budget = Budget(limits, DEFAULT_HEADROOM if args.headroom is None else _headroom(args.headroom))
    count = _whole(args.verify_count, "--verify-count", 1, 100, DEFAULT_COUNT)
    run = RunSettings(reference, model.lora.rank if model.lora else None,
                      _whole(args.steps, "--steps", 1, 10, DEFAULT_STEPS), limits.gpu_memory,
                      float(_whole(args.timeout, "--timeout", 1, 86400, DEFAULT_TIMEOUT)))
    cache = VerifyCache(None if args.no_cache else cache_dir())
    cache.check()  # a linked cache folder is refused first: it is the user's input, whatever is installed
    hook = dry_run_hook()  # refused here, before anything is planned, when zero-core is not installed

    def identity(candidate: Candidate) -> str:
        return cache_key(dry_run_request(candidate.estimate, given, run), model_config)

    budget_limits = Limits(budget.gpu, limits.cpu_memory, limits.nvme)
    planned = trials(model, setup.cluster, budget_limits, setup.training, setup.zero, identity)
    requests = [dry_run_request(t.candidate.estimate, given, run) for t in planned]
    keys = [cache_key(request, model_config) for request in requests]
    started = time.monotonic()
    outcomes = search(planned, requests, keys, budget, count, setup.cluster.gpus_per_node, cache, hook)
    survivors = ranked([o for o in outcomes if o.fits])
    data = {
        "budget": {"gpu_memory": limits.gpu_memory, "headroom": budget.headroom, "gpu_budget": budget.gpu,
                   "cpu_memory": limits.cpu_memory, "nvme": limits.nvme},
        "verify_count": count,
        "steps": run.steps,
        "cache": None if cache.directory is None else str(cache.directory),
        "seconds": round(time.monotonic() - started, 1),
        "candidates": [outcome_dict(o) for o in outcomes],
        # Indices into candidates, best first by the throughput proxy (step_traffic's cost_per_token).
        "survivors": [outcomes.index(o) for o in survivors],
    }
    chosen = survivors[0].trial.candidate.estimate if survivors else None
    return Verified(data, verify_text(outcomes, survivors, budget, count), chosen)


def ranked(survivors: list[Outcome]) -> list[Outcome]:
    """Best first by the throughput proxy: nominal step time per token (lower is better); ties keep search order."""
    return sorted(survivors, key=lambda o: step_traffic(o.trial.candidate.estimate).cost_per_token)


def check_write_target(path: str, *, force: bool) -> None:
    """--write's path checked before the search, as save_ds_config will check it after."""
    target = Path(path)
    if is_link(target):
        raise EstimateError(f"{target} is a symbolic link, which zero does not write through or replace; pass "
                            "another path, or remove the link", "--write")
    try:
        check_output_path(target, "--write")
    except OutputPathError as error:
        raise EstimateError(str(error)) from None
    if target.exists() and not force:
        raise EstimateError(f"{target} exists; pass --force to replace it, or another path", "--write")


def _model_reference(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """What the dry run builds (a preset name or a config.json path), and the config's contents for the cache key."""
    if args.base_model:
        raise EstimateError("the dry run trains the model with its LM head; leave out --base-model", "verify")
    if args.preset:
        if args.preset not in causal_lm_presets():
            raise EstimateError(f"the dry run builds causal language models; {args.preset!r} is not one (those are "
                                f"{', '.join(causal_lm_presets())}); leave out --verify for it", "verify")
        return args.preset, PRESETS[args.preset]
    if args.config:
        path = Path(args.config)
        path = path / "config.json" if path.is_dir() else path
        return str(path), json.loads(read_config_text(path, what="--config"))  # the estimate has read it already
    raise EstimateError("the dry run builds the model from its config; pass --preset or --config, not --params",
                        "verify")


def _check_traceable(model: ModelSpec, setup: Setup, given: dict[str, Any] | None) -> None:
    """Refuse what the dry run cannot trace: it checkpoints every layer or none, on the GPU, adapts every linear
    layer of the blocks with LoRA, and builds stage 3's model under zero.Init."""
    training = setup.training
    if model.lora is not None and model.lora.targets != ("all-linear",):
        raise EstimateError("the dry run adapts every linear layer of the blocks (all-linear); leave out "
                            "--lora-targets", "verify")
    if not setup.zero.zero_init:
        raise EstimateError("the dry run builds stage 3's model under zero.Init; leave out --no-zero-init", "verify")
    if training.checkpointing == "selective":
        raise EstimateError("the dry run checkpoints every layer or none; pass --checkpointing full or none", "verify")
    for flag, off in (("--checkpoint-every", training.checkpoint_every == 1),
                      ("--cpu-checkpointing", not training.cpu_checkpointing),
                      ("--offload-activations", not training.offload_activations)):
        if not off:
            raise EstimateError(f"the dry run checkpoints every layer on the GPU (torch.utils.checkpoint); leave out "
                                f"{flag}", "verify")
    if (given is None or "optimizer" not in given) and training.optimizer not in OPTIMIZER_BLOCKS:
        raise EstimateError(f"traces {', '.join(OPTIMIZER_BLOCKS)} without a --ds-config; pass one of them to "
                            "--optimizer, or a --ds-config with the optimizer block", "verify")


def _headroom(text: str) -> float:
    cleaned = text.strip()
    try:
        value = float(cleaned[:-1]) / 100 if cleaned.endswith("%") else float(cleaned)
    except ValueError:
        raise EstimateError(f"{text!r} is not a fraction; pass e.g. 0.1 or 10%", "headroom") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_HEADROOM:
        raise EstimateError(f"{text} is out of range; pass 0 to {MAX_HEADROOM:g} (or 0% to {MAX_HEADROOM:.0%})",
                            "headroom")
    return value


def refuse_without_verify(args: argparse.Namespace) -> None:
    """A flag of --verify given without it would change nothing: refused, naming it."""
    for name, flag in _VERIFY_FLAGS.items():
        if getattr(args, name) not in (None, False):
            raise EstimateError("goes with --verify; add --verify, or leave it out", flag)


def _whole(text: str | None, flag: str, low: int, high: int, default: int) -> int:
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise EstimateError(f"{text!r} is not a whole number; pass {low} to {high}", flag) from None
    if not low <= value <= high:
        raise EstimateError(f"{value} is out of range; pass {low} to {high}", flag)
    return value
