"""Ask the installed memory estimator (zero-estimate, through `zero_estimate_memory`) for an estimate.

`check_settings` asks it first (`zero_estimate_check`) whether it takes every setting of the request,
before any model is built or traced.
"""
from __future__ import annotations

from typing import Any

from zero_plugins import ZeroError, plugin_hooks, use_hookspecs

from . import _hookspecs
from ._request import ProfileRequest, Setting

HOOK = "zero_estimate_memory"
CHECK_HOOK = "zero_estimate_check"


class NoEstimator(ZeroError, RuntimeError):
    """No installed plugin implements `zero_estimate_memory`."""


def estimate_memory(request: dict[str, Any]) -> dict[str, Any]:
    """The first plugin's answer to `request` (see the hookspec)."""
    manager = use_hookspecs(_hookspecs)
    for hook in plugin_hooks(manager, HOOK):
        answer = hook(request=request)
        if isinstance(answer, dict):
            return answer
    raise NoEstimator(f"no installed plugin implements {HOOK}, so there is no estimate to compare with; "
                      "install zero-estimate (pip install zero-estimate, or -e packages/zero-estimate)")


def estimate_request(request: ProfileRequest, setting: Setting) -> dict[str, Any]:
    """The hooks' request for one setting, but "module" and "device" (known only where the model is built)."""
    return {"ds_config": request.config_for(setting), "world_size": request.nproc, "seq_len": request.seq_len,
            "stage": setting.stage, "checkpointing": "full" if request.gradient_checkpointing else "none",
            "attention": request.attention.value,
            "checkpointing_via": "torch"}  # prepared_model checkpoints through Hugging Face (torch.utils.checkpoint)


def check_settings(request: ProfileRequest) -> None:
    """Every installed estimator's refusal of a setting, raised now (an estimator without the check is asked later)."""
    manager = use_hookspecs(_hookspecs)
    for setting in request.settings:
        for hook in plugin_hooks(manager, CHECK_HOOK):
            hook(request=estimate_request(request, setting))


# Lines of the model's construction (the fp32 model or layer built before initialize returns): the profile
# measures init after initialize, so it never sees them.
_BUILD = "build"


def estimated_categories(estimate: dict[str, Any], phase: str, location: str = "gpu") -> dict[str, int]:
    """Bytes per category at `location` in `phase`, per rank, from the estimate's lines (not the model's build)."""
    totals: dict[str, int] = {}
    for line in estimate["lines"]:
        if line["location"] == location and phase in line["phases"] and line.get("instant") != _BUILD:
            totals[line["category"]] = totals.get(line["category"], 0) + int(line["bytes"])
    return totals
