"""Which implementation the optimizer steps with, so the report says what its step figure stands for.

torch's optimizers step with foreach kernels (a list of temporaries for every tensor at once), fused kernels
(none) or tensor by tensor; a group's explicit `foreach`/`fused` decides, else torch's default for its
parameters. Inside a dry run torch answers for the target device (zero_core.dryrun, _optimizer_kernels.py).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.optim.optimizer as torch_optimizer


def optimizer_kernel(optimizer: torch.optim.Optimizer) -> str:
    """"foreach", "fused" or "single-tensor" (joined when groups differ); an optimizer without torch's choice
    (zero-offload's CPU optimizers, LBFGS) is named: "CPUAdam's own step"."""
    if "foreach" not in optimizer.defaults and "fused" not in optimizer.defaults:
        return f"{type(optimizer).__name__}'s own step"
    return ", ".join(sorted({_group_kernel(group) for group in optimizer.param_groups}))


def _group_kernel(group: dict[str, Any]) -> str:
    fused, foreach = group.get("fused"), group.get("foreach")
    if fused is None and foreach is None:  # torch's default; it never defaults to fused
        fused, foreach = torch_optimizer._default_to_fused_or_foreach(
            list(group["params"]), bool(group.get("differentiable", False)), use_fused=False)
    return "fused" if fused else "foreach" if foreach else "single-tensor"
