"""fp32 master weights: the elements this rank updates, one 1-D tensor per bucket.

A rank owns a whole bucket at stage 0 and its shard of each bucket from stage 1 on
(`owned_range`). With 16-bit compute the master is a copy, taken from the parameters'
original values so no precision is lost to the cast; with fp32 compute it is a view of the
flat parameters themselves, so the optimizer updates them in place and no copy exists,
unless the optimizer is offloaded: then the master is always a copy at the offload device.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
from zero_plugins import Category

from ..memory import MemoryLedger
from ._homes import StateHomes
from ._layout import FlatLayout
from ._storage import FlatStorage
from ._sub_groups import step_by_sub_group, sub_group_views


def owned_range(layout: FlatLayout, rank: int, sharded: bool) -> tuple[int, int]:
    return layout.shard_range(rank) if sharded else (0, layout.padded_numel)


def copy_owned(target: torch.Tensor, layout: FlatLayout, lo: int, hi: int) -> torch.Tensor:
    """Copy elements [lo, hi) of the layout's parameters (which hold full values now) into `target`."""
    for piece in layout.pieces_in(lo, hi):
        source = piece.slot.param.data.reshape(-1)[piece.start : piece.stop]
        target[piece.shard_offset : piece.shard_offset + piece.stop - piece.start].copy_(source)
    return target


class MasterParams:
    def __init__(self, tensors: list[torch.Tensor], ranges: list[tuple[int, int]], is_view: bool) -> None:
        self.tensors = tensors
        self.ranges = ranges
        self.is_view = is_view
        # What the optimizer steps: the tensors themselves, or their sub-group views (see _sub_groups.py).
        self.optimizer_params: list[torch.Tensor] = list(tensors)
        self._sub_group_numel: int | None = None
        self.step_grads: list[torch.Tensor] | None = None  # offloaded optimizer: where whole gradients land

    @classmethod
    def copy_of(cls, layouts: Sequence[FlatLayout], rank: int, sharded: bool, homes: StateHomes) -> MasterParams:
        """fp32 copies of the owned elements, read from the parameters before they are flattened."""
        tensors, ranges = [], []
        for layout in layouts:
            lo, hi = owned_range(layout, rank, sharded)
            tensors.append(copy_owned(homes.master(hi - lo), layout, lo, hi))
            ranges.append((lo, hi))
        return cls(tensors, ranges, is_view=False)

    @classmethod
    def view_of(cls, flat: FlatStorage, rank: int, sharded: bool) -> MasterParams:
        ranges = [owned_range(layout, rank, sharded) for layout in flat.layouts]
        tensors = [flat.owned(i, lo, hi) for i, (lo, hi) in enumerate(ranges)]
        return cls(tensors, ranges, is_view=True)

    def load_grads(self, grads: Sequence[torch.Tensor], inv_scale: float, ledger: MemoryLedger, homes: StateHomes,
                   in_place: bool) -> None:
        """Give each master tensor its fp32 gradient, unscaled (see fp32_grads)."""
        full = fp32_grads(self, grads, inv_scale, ledger, homes, in_place)
        if self._sub_group_numel is not None:
            full = sub_group_views(full, self._sub_group_numel)  # cut exactly as the master was
        for param, grad in zip(self.optimizer_params, full):
            param.grad = grad

    def numels(self) -> list[int]:
        return [tensor.numel() for tensor in self.tensors]

    def sub_groups(self, index: int) -> list[tuple[torch.Tensor, int]]:
        """The optimizer params that cover master tensor `index`, each with its first element's offset in it."""
        if self._sub_group_numel is None:
            return [(self.optimizer_params[index], 0)]
        first = sum(len(sub_group_views([tensor], self._sub_group_numel)) for tensor in self.tensors[:index])
        views = sub_group_views([self.tensors[index]], self._sub_group_numel)
        return [(self.optimizer_params[first + k], k * self._sub_group_numel) for k in range(len(views))]

    def split_into_sub_groups(self, max_numel: int) -> None:
        self._sub_group_numel = max_numel
        self.optimizer_params = sub_group_views(self.tensors, max_numel)

    def step_offloaded(self, optimizer: torch.optim.Optimizer, group_index: int, flat: FlatStorage,
                       homes: StateHomes) -> None:
        """Step param group `group_index` one sub-group at a time (the master is in host memory)."""
        step_by_sub_group(optimizer, group_index)

    def clear_grads(self) -> None:
        for param in self.optimizer_params:
            param.grad = None

    def write_back(self, flat: FlatStorage, homes: StateHomes) -> None:
        """Copy the updated master into the compute-dtype parameters (nothing to do for a view)."""
        if self.is_view:
            return
        for index, (master, (lo, hi)) in enumerate(zip(self.tensors, self.ranges)):
            homes.master_to_params(flat.owned(index, lo, hi), master, flat.is_offloaded(index))
            if flat.is_offloaded(index):
                homes.synchronize()  # the values must be in place before a partition in swap space is saved
            flat.commit(index)


class MasterGrads(Protocol):
    """What fp32_grads needs of a master: its tensors' sizes, and where an offloaded step's gradients persist."""

    step_grads: list[torch.Tensor] | None

    def numels(self) -> list[int]: ...


def fp32_grads(master: MasterGrads, grads: Sequence[torch.Tensor], inv_scale: float, ledger: MemoryLedger,
               homes: StateHomes, in_place: bool) -> list[torch.Tensor]:
    """The fp32 gradient of each master tensor, unscaled.

    `in_place`: the gradients already are fp32 where the step runs (an offloaded partition). Else
    an offloaded optimizer copies them into its persistent buffers, and on the device an fp32
    gradient is used as it is and a 16-bit one is copied (`optim.grad`, for the step only).
    """
    if homes.optimizer_offloaded and not in_place:
        if master.step_grads is None:
            master.step_grads = [homes.step_grads(numel) for numel in master.numels()]
        for target, grad in zip(master.step_grads, grads):
            homes.grads_to_optimizer(target, grad, accumulate=False)
        homes.synchronize()
        grads = master.step_grads
    full = []
    for grad in grads:
        if grad.dtype == torch.float32:
            full.append(grad.mul_(inv_scale) if inv_scale != 1.0 else grad)
        else:
            made = ledger.new(Category.OPTIM_GRAD, lambda: grad.float())
            full.append(made.mul_(inv_scale) if inv_scale != 1.0 else made)
    return full
