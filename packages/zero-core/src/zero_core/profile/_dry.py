"""`zero profile --dry-run`: the profile's ranks traced in this process on fake tensors (zero_core.dryrun).

Each traced rank runs every setting as a spawned rank would: the model is built on the meta device (no memory,
no values), given fake storage on the target device, initialized by the real engine under a fake process group
of `--nproc` ranks, and trained `--steps` steps with tracking on. The fake allocator is the ruler. Ranks are
symmetric but for the last, whose partitions hold the padding, so rank 0 and the last rank are traced.
"""
from __future__ import annotations

import copy
import gc
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from zero_plugins import AttentionKind, ZeroError

from ..dryrun import TARGET_OF, dry_run, forced_flash
from ._attention import hf_implementation
from ._models import build_model
from ._ranks import DTYPES, measure_setting, prepared_model
from ._request import DryRunTarget, ProfileRequest

# What a dry run counts from sizes rather than tracing, as the report lists it.
MODELLED = {
    "cuda": [
        "pinned host memory: fake host tensors counted as pinned where the engine pins (no driver is asked)",
        "NCCL's buffers and the CUDA context: outside the caching allocator's count, as on a real run",
        "kernels' workspaces (cuBLAS, attention) and the caching allocator's reserve: not seen (outputs only)",
        "attention: SDPA runs the kernel torch picks on an Ampere-or-newer GPU (flash, memory-efficient or math); "
        "FlashAttention-2 (--attention flash) keeps what the flash kernel keeps",
    ],
    "cpu": [
        "kernels' temporaries inside an op: not seen (outputs only)",
    ],
}


def traced_ranks(world_size: int) -> tuple[int, ...]:
    """Rank 0, and the last rank when there is more than one."""
    return (0,) if world_size == 1 else (0, world_size - 1)


def run_dry_ranks(request: ProfileRequest) -> list[list[dict[str, Any]]]:
    """What `run_ranks` returns for a real run: per traced rank, per setting, the measured phases."""
    target = request.dry_run
    assert target is not None, "run_dry_ranks needs a request with dry_run set"
    with _deadline(request.timeout):
        _progress("the model")("building it on the meta device, once for every rank and setting")
        # Built once (seconds for a 70B model), copied for each trace (a tenth of a second): a meta model holds no
        # data.
        model = build_model(request.model_config, DTYPES[request.precision], request.seed, device="meta",
                            attention=hf_implementation(request.attention, dry_run=True))
        template = prepared_model(request, model)
        return [_dry_rank(rank, request, target, template) for rank in target.ranks]


class DryRunTimedOut(ZeroError, TimeoutError):
    """A dry run still tracing at --timeout."""


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Stop the block after `seconds` (--timeout), as a real run's ranks are killed then. Python delivers signals
    to the main thread only: a dry run started from another thread (the Python API) has no deadline."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise DryRunTimedOut(f"zero profile --dry-run was still tracing after --timeout {seconds:g} seconds and was "
                             "stopped; pass a larger --timeout, or fewer --steps or settings")

    previous = signal.signal(signal.SIGALRM, stop)
    # Again every second after the first: Python ignores an exception raised inside a weakref callback or a
    # __del__ (the ledger's and the tracker's run all through a trace), and one alarm landing there was lost.
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _dry_rank(rank: int, request: ProfileRequest, target: DryRunTarget,
              template: torch.nn.Module) -> list[dict[str, Any]]:
    generator = torch.Generator().manual_seed(request.seed + rank)
    results = []
    for index, setting in enumerate(request.settings, start=1):
        say = _progress(f"rank {rank} of {request.nproc}, {setting.label} ({index}/{len(request.settings)})")
        model = copy.deepcopy(template)
        with dry_run(rank=rank, world_size=request.nproc, device=target.device,
                     total_memory=target.total_memory) as run, forced_flash(request.attention is AttentionKind.FLASH):
            model = to_empty_keeping_ties(model, run.accelerator.device())
            result = measure_setting(rank, request.nproc, request, setting, model, generator, say)
        results.append(_named_as_target(result))
        del model
        gc.collect()
    return results


def to_empty_keeping_ties(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """`model.to_empty(device=device)` with every parameter shared by several modules still shared (tied
    embeddings: the LM head's weight is the input embedding's). `Module.to_empty` gives each module a new
    parameter of its own, which would train, store and count a tied matrix twice."""
    sharing: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                sharing.setdefault(id(param), []).append((module, name))
    model = model.to_empty(device=device)
    for (first, first_name), *others in (places for places in sharing.values() if len(places) > 1):
        for module, name in others:
            module._parameters[name] = first._parameters[first_name]
    return model


def _named_as_target(value: Any) -> Any:
    """The traced device's name ("lazy") replaced by the target's ("cuda") in keys and values."""
    if isinstance(value, dict):
        return {_renamed(key): _named_as_target(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_named_as_target(item) for item in value]
    return _renamed(value)


def _renamed(value: Any) -> Any:
    return TARGET_OF.get(value, value) if isinstance(value, str) else value


def _progress(what: str) -> Callable[[str], None]:
    started = time.monotonic()

    def say(message: str) -> None:  # stderr: --json keeps stdout to itself
        print(f"zero profile --dry-run: {what}: {message} ({time.monotonic() - started:.0f} s)", file=sys.stderr,
              flush=True)

    return say
