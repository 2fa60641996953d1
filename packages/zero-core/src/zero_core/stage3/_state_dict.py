"""Consolidating a stage-3 model's full weights on rank 0, one unit at a time."""
from __future__ import annotations

import torch

from ._coordinator import GatherCoordinator
from ._unit import unit_of


def consolidated_state_dict(module: torch.nn.Module, coordinator: GatherCoordinator, rank: int) -> dict[str, torch.Tensor]:
    """Keys and order of `module.state_dict()`; tied parameters appear under each name, as there."""
    copies: dict[int, torch.Tensor] = {}

    def copy(tensor: torch.Tensor) -> None:
        if rank == 0:
            copies[id(tensor)] = tensor.detach().to("cpu", copy=True)

    done: set[int] = set()
    for param in module.parameters():
        unit = unit_of(param)
        if unit is None:
            copy(param)
        elif id(unit) not in done:
            done.add(id(unit))
            with coordinator.available(unit):  # every rank gathers, in the same order
                for member in unit.params:
                    copy(member)
    if rank != 0:
        return {}
    result: dict[str, torch.Tensor] = {}
    for prefix, owner in module.named_modules(remove_duplicate=False):
        head = f"{prefix}." if prefix else ""
        for name, param in owner._parameters.items():
            if param is not None:
                result[head + name] = copies[id(param)]
        for name, buffer in owner._buffers.items():
            if buffer is not None and name not in owner._non_persistent_buffers_set:
                result[head + name] = buffer.detach().to("cpu", copy=True)
    return result
