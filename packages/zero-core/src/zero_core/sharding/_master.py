"""fp32 master weights: the elements this rank updates, one 1-D tensor per bucket, and the `Master` contract.

A rank owns a whole bucket at stage 0 and its shard of each bucket from stage 1 on
(`owned_range`). With 16-bit compute the master is a copy, taken from the parameters'
original values so no precision is lost to the cast; with fp32 compute it is a view of the
flat parameters themselves, so the optimizer updates them in place and no copy exists,
unless the master and the parameters live apart (either offloaded). Which kind a run gets,
and where it lives, is chosen once (_master_homes.py). `MasterParams` is the master in memory;
`SwappedMaster` (_swapped_master.py) the master in swap space.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from ._home import Home
from ._layout import FlatLayout
from ._storage import FlatStorage
from ._sub_groups import step_by_sub_group, step_one, sub_group_views


class Master(Protocol):
    """What the optimizer needs of a param group's fp32 master, wherever it lives."""

    ranges: list[tuple[int, int]]  # per layout, the owned elements [lo, hi) the master holds
    optimizer_params: list[torch.Tensor]  # what the torch optimizer steps

    def load_grads(self, grads: Sequence[torch.Tensor]) -> None:
        """Take each master tensor's fp32 gradient, unscaled, for the next step."""
        ...

    def step(self, optimizer: torch.optim.Optimizer, group_index: int) -> None:
        """Step param group `group_index` one sub-group at a time (where the plan steps by sub-group: at an
        offload device, and at stage 3)."""
        ...

    def clear_grads(self) -> None:
        ...

    def write_back(self) -> None:
        """Copy the updated master into the compute-dtype parameters (what a step did not already)."""
        ...

    def in_memory(self) -> list[torch.Tensor]:
        """The master tensors held in memory (none for a master in swap space)."""
        ...


def owned_range(layout: FlatLayout, rank: int, *, sharded: bool) -> tuple[int, int]:
    return layout.shard_range(rank) if sharded else (0, layout.padded_numel)


def copy_owned(target: torch.Tensor, start: int = 0, *, layout: FlatLayout, lo: int, hi: int) -> torch.Tensor:
    """Copy the owned elements [lo, hi) of the layout's parameters (which hold full values now) into `target`,
    from the `start`-th on and as many as `target` holds (a master in swap space is filled one sub-group at a time)."""
    first = lo + start
    for piece in layout.pieces_in(first, min(hi, first + target.numel())):
        source = piece.slot.param.data.reshape(-1)[piece.start : piece.stop]
        target[piece.shard_offset : piece.shard_offset + piece.stop - piece.start].copy_(source)
    return target


class MasterParams:
    """A Master in memory: copies at `home`, or (`home` None) views of the flat parameters' owned elements."""

    def __init__(self, tensors: list[torch.Tensor], ranges: list[tuple[int, int]], flat: FlatStorage,
                 home: Home | None, *, sub_group_numel: int | None = None) -> None:
        self.tensors = tensors
        self.ranges = ranges
        self._flat = flat
        self._home = home
        # Each tensor's write-back target, resolved here once: the home of the compute-dtype elements it updates,
        # or None where nothing is written (a view: the step updated the parameters; or gathers cast the master).
        self._write_back_to: list[Home | None] = [
            None if home is None or flat.cast_from_master(index) else flat.home(index) for index in range(len(tensors))]
        self._sub_group_numel = sub_group_numel
        # What the optimizer steps: the tensors themselves, or their sub-group views (see _sub_groups.py).
        self.optimizer_params = list(tensors) if sub_group_numel is None else sub_group_views(tensors, sub_group_numel)

    @classmethod
    def view_of(cls, flat: FlatStorage, ranges: list[tuple[int, int]], *,
                sub_group_numel: int | None = None) -> MasterParams:
        tensors = [flat.owned(i, lo, hi) for i, (lo, hi) in enumerate(ranges)]
        return cls(tensors, ranges, flat, None, sub_group_numel=sub_group_numel)

    def load_grads(self, grads: Sequence[torch.Tensor]) -> None:
        full = list(grads)
        if self._sub_group_numel is not None:
            full = sub_group_views(full, self._sub_group_numel)  # cut exactly as the master was
        for param, grad in zip(self.optimizer_params, full):
            param.grad = grad

    def sub_groups(self, index: int) -> list[tuple[torch.Tensor, int]]:
        """The optimizer params that cover master tensor `index`, each with its first element's offset in it."""
        if self._sub_group_numel is None:
            return [(self.optimizer_params[index], 0)]
        first = sum(len(sub_group_views([tensor], self._sub_group_numel)) for tensor in self.tensors[:index])
        views = sub_group_views([self.tensors[index]], self._sub_group_numel)
        return [(self.optimizer_params[first + k], k * self._sub_group_numel) for k in range(len(views))]

    def step(self, optimizer: torch.optim.Optimizer, group_index: int) -> None:
        step_by_sub_group(optimizer, group_index)

    def clear_grads(self) -> None:
        for param in self.optimizer_params:
            param.grad = None

    def write_back(self) -> None:
        for index in range(len(self.tensors)):
            self.write_back_one(index)

    def write_back_one(self, index: int) -> None:
        """Copy master tensor `index` into the compute-dtype parameters it updates."""
        target, source = self._write_back_to[index], self._home
        if target is None or source is None:
            return
        lo, hi = self.ranges[index]
        target.copy_from(self._flat.owned(index, lo, hi), self.tensors[index], source)
        self._flat.commit(index)

    def step_one_tensor(self, optimizer: torch.optim.Optimizer, group_index: int, index: int,
                        grad: torch.Tensor) -> None:
        """Step master tensor `index` alone with its fp32 gradient, one sub-group per call, and write it back."""
        # cut exactly as the master was (as load_grads cuts)
        views = [grad] if self._sub_group_numel is None else sub_group_views([grad], self._sub_group_numel)
        for (param, _), view in zip(self.sub_groups(index), views):
            param.grad = view
            step_one(optimizer, group_index, param)
            param.grad = None
        self.write_back_one(index)

    def in_memory(self) -> list[torch.Tensor]:
        return self.tensors
