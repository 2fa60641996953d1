"""Sub-groups: the optimizer steps a master `sub_group_size` elements at a time, as DeepSpeed does.

Where the placement plan steps by sub-group (an offloaded optimizer, and stage 3 on the device),
each master tensor is handed to the optimizer as views of at most `sub_group_size` elements,
never across a tensor, and the step runs one view at a time, so whatever
the optimizer allocates for a parameter (torch's single-tensor Adam makes parameter-sized
temporaries) is bounded by a sub-group, and an NVMe swapper can bring in one sub-group's
state at a time. Adam and its kin are elementwise, so the result equals one step over the
whole tensor.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


def sub_group_views(tensors: list[torch.Tensor], max_numel: int) -> list[torch.Tensor]:
    """Consecutive views of each 1-D tensor, each of at most `max_numel` elements."""
    views: list[torch.Tensor] = []
    for tensor in tensors:
        views.extend(tensor.split(max_numel) if tensor.numel() > 0 else [tensor])
    return views


@runtime_checkable
class StepsGivenParams(Protocol):
    """An optimizer that steps the parameters it is handed with one param group's settings (zero-offload's CPU
    optimizers): no swapping of `param_groups`, and one call for many sub-groups where its kernels make no
    parameter-sized temporaries."""

    def step_params(self, group_index: int, params: list[torch.Tensor]) -> None:
        ...


def step_by_sub_group(optimizer: torch.optim.Optimizer, group_index: int) -> None:
    """One step of every parameter of param group `group_index`: one parameter (sub-group) per call, or all in
    one call for an optimizer that steps given params (its fused kernels allocate nothing per parameter)."""
    group = optimizer.param_groups[group_index]
    if isinstance(optimizer, StepsGivenParams):
        optimizer.step_params(group_index, list(group["params"]))
        return
    for param in group["params"]:
        step_one(optimizer, group_index, param)


def step_one(optimizer: torch.optim.Optimizer, group_index: int, param: torch.Tensor) -> None:
    """One step of `param` alone, with param group `group_index`'s settings (a scheduler may have changed them)."""
    if isinstance(optimizer, StepsGivenParams):
        optimizer.step_params(group_index, [param])
        return
    groups = optimizer.param_groups
    optimizer.param_groups = [{**groups[group_index], "params": [param]}]
    try:
        optimizer.step()
    finally:
        optimizer.param_groups = groups
