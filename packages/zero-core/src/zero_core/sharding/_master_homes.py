"""Where the fp32 master and the optimizer state live, and so how the step runs: one stepper per placement.

The step runs where the optimizer state lives. On the device the master is a view of fp32
parameters (`ViewMasters`) or a copy (`InMemoryMasters`); at an offload device a copy in
host memory (`InMemoryMasters`) or in swap space (`SwappedMasters`). The placement plan's
step granularity says whether torch's optimizer steps every group in one call (stages 0-2
on the device) or `sub_group_size` elements at a time, never across a unit (stage 3, and
every offloaded step), which bounds its temporaries.
The builders ask the chosen `MasterHome` for each copy and for the assembled `Master`; at the step it
owns the whole path, load-grads -> step -> write-back (`step`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Protocol

import torch
from zero_plugins import Category

from ..memory import MemoryLedger, Placement
from ._home import Home
from ._master import Master, MasterParams
from ._storage import FlatStorage
from ._swap_pool import SwappedTensor, SwapPool
from ._swapped_master import SwappedMaster

MasterCopy = torch.Tensor | SwappedTensor
# Writes the owned elements from the given one on into a zeroed tensor (as many as it holds) and returns it.
Fill = Callable[[torch.Tensor, int], torch.Tensor]


class GradientsToStep(Protocol):
    """What the stepper needs of a group's gradient partitions (GradBuckets)."""

    def __len__(self) -> int: ...

    def owned(self, index: int) -> torch.Tensor: ...

    def for_step(self, owned: list[torch.Tensor], inv_scale: float) -> list[torch.Tensor]: ...

    def release(self) -> None: ...


class GroupToStep(Protocol):
    """A param group as its stepper sees it (ShardedGroup): its master and its gradients."""

    @property
    def master(self) -> Master: ...

    @property
    def grads(self) -> GradientsToStep: ...


class MasterHome(ABC):
    @abstractmethod
    def copy(self, name: str, numel: int, fill: Fill) -> MasterCopy | None:
        """A master copy of `numel` owned elements that `fill` writes (None: the master is a view of the parameters)."""

    @abstractmethod
    def assemble(self, copies: Sequence[MasterCopy | None], ranges: list[tuple[int, int]],
                 flat: FlatStorage) -> MasterParams | SwappedMaster:
        """One param group's master over `flat`'s layouts, from the copies made for them."""

    def step(self, optimizer: torch.optim.Optimizer, groups: Sequence[GroupToStep], inverse_scale: float) -> None:
        """One step of every param group, owned here from end to end: each group's gradients loaded into its
        master (times `inverse_scale`, the unscale and the clip in one), the optimizer stepped where the state
        lives, the gradients freed and the master written back into the parameters."""
        for group in groups:
            # The last group's `owned` views keep its buckets alive until the step returns, as the ledger's and
            # zero-estimate's figures for the step expect (a released bucket's memory is freed otherwise).
            owned = [group.grads.owned(index) for index in range(len(group.grads))]
            group.master.load_grads(group.grads.for_step(owned, inverse_scale))
        self.step_masters(optimizer, [group.master for group in groups])
        for group in groups:
            group.master.clear_grads()
            group.grads.release()  # zeroed for the next accumulation, or freed
            group.master.write_back()

    @abstractmethod
    def step_masters(self, optimizer: torch.optim.Optimizer, masters: Sequence[Master]) -> None:
        """The optimizer's step of every param group's master, its gradients loaded."""

    @abstractmethod
    def count_state(self, optimizer: torch.optim.Optimizer, ledger: MemoryLedger) -> None:
        """Count the optimizer state in memory in the ledger (after a step, which may have made it)."""


class InMemoryMasters(MasterHome):
    """fp32 copies in memory at `home`: on the device (16-bit compute, or parameters offloaded), or in host
    memory at the optimizer's offload device. With `sub_group_numel` each master tensor steps in views of at
    most that many elements, so the optimizer's temporaries are bounded by one; without it torch's optimizer
    steps every group in one call."""

    def __init__(self, home: Home, sub_group_numel: int | None) -> None:
        self.home = home
        self.sub_group_numel = sub_group_numel

    def copy(self, name: str, numel: int, fill: Fill) -> MasterCopy | None:
        return fill(self.home.allocate(numel, torch.float32, Category.OPTIM_MASTER), 0)

    def assemble(self, copies: Sequence[MasterCopy | None], ranges: list[tuple[int, int]],
                 flat: FlatStorage) -> MasterParams | SwappedMaster:
        return MasterParams([_in_memory(copy) for copy in copies], ranges, flat, self.home,
                            sub_group_numel=self.sub_group_numel)

    def step_masters(self, optimizer: torch.optim.Optimizer, masters: Sequence[Master]) -> None:
        if self.sub_group_numel is None:
            optimizer.step()
            return
        for index, master in enumerate(masters):
            master.step(optimizer, index)

    def count_state(self, optimizer: torch.optim.Optimizer, ledger: MemoryLedger) -> None:
        _count(optimizer, ledger, self.home.placement)


class ViewMasters(InMemoryMasters):
    """fp32 compute with nothing offloaded: the master is the parameters' owned elements, and no copy exists."""

    def copy(self, name: str, numel: int, fill: Fill) -> MasterCopy | None:
        return None

    def assemble(self, copies: Sequence[MasterCopy | None], ranges: list[tuple[int, int]],
                 flat: FlatStorage) -> MasterParams | SwappedMaster:
        return MasterParams.view_of(flat, ranges, sub_group_numel=self.sub_group_numel)


class SwappedMasters(InMemoryMasters):
    """The master and optimizer state in swap space (one slot per swap slice and tensor), streamed through
    the pool's buffers, which are host memory at `home`; the optimizer steps one slice (a buffer's worth) at a time."""

    def __init__(self, home: Home, pool: SwapPool, ledger: MemoryLedger) -> None:
        super().__init__(home, pool.settings.buffer_numel)
        self.pool = pool
        self.ledger = ledger

    def copy(self, name: str, numel: int, fill: Fill) -> MasterCopy | None:
        return SwappedTensor(name, numel, self.sub_group_numel, self.pool, Category.OPTIM_MASTER).write(fill)

    def assemble(self, copies: Sequence[MasterCopy | None], ranges: list[tuple[int, int]],
                 flat: FlatStorage) -> MasterParams | SwappedMaster:
        swapped = [copy for copy in copies if isinstance(copy, SwappedTensor)]
        return SwappedMaster(swapped, ranges, flat, self.home, self.pool, self.ledger)

    def count_state(self, optimizer: torch.optim.Optimizer, ledger: MemoryLedger) -> None:
        """Nothing to count here: the state is counted in its slots, and its step counts as they are made."""


def _in_memory(copy: MasterCopy | None) -> torch.Tensor:
    assert isinstance(copy, torch.Tensor), "an in-memory master home makes tensors"
    return copy


def _count(optimizer: torch.optim.Optimizer, ledger: MemoryLedger, placement: Placement) -> None:
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                ledger.register(value, Category.OPTIM_STATE, placement, pinned=False)
