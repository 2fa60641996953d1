"""`zero_verify_candidate`: one configuration of `zero plan --verify`, traced by the dry run (zero_core.dryrun).

The hookspec is zero-estimate's (zero_estimate/_verify_hookspecs.py), which zero-core cannot import; the request
is a plain dict, checked here. The answer is the dry run's measurement, not a verdict: `zero plan` holds it to
its limits, and caches it keyed by the request.
"""
from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from typing import Any

from zero_plugins import AttentionKind
from zero_plugins.ds_config import IgnoredConfigKeysWarning, load_config

from ._attention import check_attention
from ._cli import ProfileArgumentError
from ._dry import traced_ranks
from ._estimator import check_settings
from ._models import model_config, transformers_config
from ._request import DryRunTarget, ProfileRequest, Setting
from ._run import run_profile

REQUIRED = ("model", "ds_config", "nproc", "micro_batch", "seq_len", "gradient_checkpointing", "lora_rank",
            "attention", "steps", "device_memory", "timeout")


def verify_candidate(request: Mapping[str, Any]) -> dict[str, Any]:
    """The dry run's peaks of one configuration on a CUDA target (see the hookspec for the keys)."""
    started = time.monotonic()
    with warnings.catch_warnings():  # `zero plan` read the user's config, and warned of its ignored keys, once
        warnings.simplefilter("ignore", IgnoredConfigKeysWarning)
        profile = _profile_request(request)
        report = run_profile(profile)
    setting = report["settings"][0]
    peak = setting["peak"]["measured"]
    return {
        "device": setting["device"],
        # Rank 0's allocator count at its peak phase, and each traced rank's ledger peak (the last rank holds the
        # padding); the larger is the rank's need.
        "gpu_peak": max(peak["bytes"], *setting["ranks"]),
        "gpu_peak_phase": peak["phase"],
        "ranks": dict(zip((str(rank) for rank in traced_ranks(profile.nproc)), setting["ranks"])),
        "categories": setting["phases"][peak["phase"]]["measured"],
        "host_peak": _host_peak(setting["host"]),
        "optimizer_kernel": setting["optimizer_kernel"],
        "attention_kernels": setting["attention"]["kernels"],
        "seconds": round(time.monotonic() - started, 1),
    }


def _profile_request(request: Mapping[str, Any]) -> ProfileRequest:
    missing = [key for key in REQUIRED if key not in request]
    if missing:
        raise ProfileArgumentError(f"zero_verify_candidate: the request lacks {', '.join(missing)}; "
                                   f"pass all of {', '.join(REQUIRED)}")
    ds_config = dict(request["ds_config"])
    zero = ds_config.get("zero_optimization") or {}
    stage = int(zero.get("stage", 0))
    setting = Setting(stage, zero.get("memory_efficient_linear") if stage == 3 else None)
    nproc = int(request["nproc"])
    profile = ProfileRequest(
        str(request["model"]), model_config(str(request["model"])), ds_config, (setting,), nproc,
        int(request["micro_batch"]), int(request["seq_len"]), int(request["steps"]), request["lora_rank"],
        gradient_checkpointing=bool(request["gradient_checkpointing"]), attention=AttentionKind(request["attention"]),
        timeout=float(request["timeout"]),
        dry_run=DryRunTarget("cuda", int(request["device_memory"]), traced_ranks(nproc)))
    # The checks `zero profile` makes before tracing, so a refusal is one line, not a traceback mid-trace.
    check_attention(profile.attention, "cuda", profile.precision, dry_run=True)
    load_config(profile.config_for(setting), world_size=nproc)
    check_settings(profile)
    transformers_config(profile.model_config)
    return profile


def _host_peak(host: Mapping[str, Mapping[str, Mapping[str, int]]]) -> int:
    """The largest host memory one rank holds at any phase: pageable, pinned and the CPU device's, together."""
    return max((sum(location.get("total", 0) for location in phase.values()) for phase in host.values()), default=0)
