"""The fp32 master and optimizer state in swap space (`offload_optimizer.device: nvme`), streamed through the step.

The master is cut into swap slices, which the optimizer steps as its sub-groups: at most
`sub_group_size` elements, fewer where the pool's budget asks for it (zero_plugins.swap_slice_numel,
only for an optimizer that steps element by element); below, "sub-group" means such a slice.
Each sub-group's master and each of its optimizer state tensors live in a swap slot. The
optimizer steps a placeholder tensor per sub-group: before its step the sub-group's slots
are read into pool buffers and the placeholder (and its state entries) point into them;
after the step the updated master is copied into the compute-dtype parameters, the
buffers are written back, and the placeholder points at nothing again. With
`pipeline_read` the next sub-group is read while this one steps (its buffers freed, when
the pool is full, by waiting for the oldest write, started a sub-group earlier); with
`pipeline_write` the writes finish while the next ones step; both as far as `buffer_count`
allows, and nothing is allocated after the first step (the pool is all). Between
steps the optimizer's param-sized state entries are empty tensors: the values are in the
slots. The result equals the same step over a master in host memory: cut as CPU offload cuts
it, bit for bit; cut finer, the same values, since each element's update reads that element alone.
"""
from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from zero_plugins import Category

from ..memory import MemoryLedger, Placement
from ..offload import SwapSlot, SwapTransfer
from ._home import Home
from ._storage import FlatStorage
from ._sub_groups import step_one
from ._swap_pool import SwapPool, SwappedTensor, wait_all


@dataclass(eq=False)
class _SubGroup:
    param: torch.Tensor  # what the optimizer steps; points into a pool buffer only while swapped in
    master: SwapSlot
    tensor_index: int
    offset: int  # of its first element in the master tensor
    states: dict[str, SwapSlot] = field(default_factory=dict)  # the optimizer's param-sized state tensors
    grad: torch.Tensor | None = None


@dataclass(eq=False)
class _InFlight:
    sub_group: _SubGroup
    buffers: list[torch.Tensor]
    transfers: list[SwapTransfer]


class SwappedMaster:
    """A Master in swap space; `home`: the host memory its buffers are in, which write-backs copy from."""

    def __init__(self, tensors: list[SwappedTensor], ranges: list[tuple[int, int]], flat: FlatStorage, home: Home,
                 pool: SwapPool, ledger: MemoryLedger) -> None:
        self.tensors = tensors
        self.ranges = ranges
        self.flat = flat
        self.home = home
        self._pool = pool
        self._ledger = ledger
        self._sub_groups = [
            _SubGroup(torch.empty(0), slot, index, offset)
            for index, tensor in enumerate(tensors) for slot, offset in zip(tensor.slots, tensor.offsets)
        ]
        self.optimizer_params = [sub_group.param for sub_group in self._sub_groups]

    def load_grads(self, grads: Sequence[torch.Tensor]) -> None:
        cut = [grad[offset : offset + slot.numel]
               for grad, tensor in zip(grads, self.tensors) for slot, offset in zip(tensor.slots, tensor.offsets)]
        for sub_group, grad in zip(self._sub_groups, cut):
            sub_group.grad = grad

    def clear_grads(self) -> None:
        for sub_group in self._sub_groups:
            sub_group.grad = None

    def write_back(self) -> None:
        """Nothing to do: each sub-group was copied into the parameters during the step, while it was in memory."""

    def in_memory(self) -> list[torch.Tensor]:
        return []

    def step(self, optimizer: torch.optim.Optimizer, group_index: int) -> None:
        _SwappedStep(self, optimizer, group_index).run()

    # --- used by _SwappedStep ---
    def bind(self, sub_group: _SubGroup, buffers: list[torch.Tensor], state: dict[str, object]) -> None:
        numel = sub_group.master.numel
        sub_group.param.data = buffers[0][:numel]
        sub_group.param.grad = sub_group.grad
        for name, buffer in zip(sub_group.states, buffers[1:]):
            state[name] = buffer[:numel]

    def unbind(self, sub_group: _SubGroup, state: dict[str, object]) -> None:
        sub_group.param.grad = None
        sub_group.param.data = torch.empty(0)
        for name in sub_group.states:
            state[name] = torch.empty(0)

    # --- checkpoints ---
    @property
    def pool(self) -> SwapPool:
        return self._pool

    def slots_of(self, index: int) -> list[tuple[int, SwapSlot, dict[str, SwapSlot]]]:
        """Master tensor `index`'s sub-groups: (first element in the tensor, master slot, state slots by name)."""
        return [(sub.offset, sub.master, sub.states) for sub in self._sub_groups if sub.tensor_index == index]

    def state_names(self) -> list[str]:
        return sorted({name for sub in self._sub_groups for name in sub.states})

    def prepare_state(self, optimizer: torch.optim.Optimizer, names: list[str], steps: object) -> None:
        """Zeroed state slots named `names` for every sub-group that lacks them, and the step count, so that a
        checkpoint's state can be loaded into them before the optimizer's first step."""
        for sub_group in self._sub_groups:
            state = optimizer.state[sub_group.param]
            for name in names:
                if name not in sub_group.states:
                    slot = self._pool.space.reserve(f"{sub_group.master.name}.{name}", sub_group.master.numel,
                                                    torch.float32, Category.OPTIM_STATE)
                    self._pool.fill(slot, 0.0)
                    sub_group.states[name] = slot
                    state[name] = torch.empty(0)
            if isinstance(steps, torch.Tensor):
                state["step"] = steps.clone()

    def new_states(self, sub_group: _SubGroup, state: dict[str, object]) -> list[str]:
        """Param-sized state tensors the optimizer made in this step (its first): each gets a slot."""
        shape = sub_group.param.shape
        made = [name for name, value in state.items()
                if isinstance(value, torch.Tensor) and value.shape == shape and name not in sub_group.states]
        for name in made:
            sub_group.states[name] = self._pool.space.reserve(
                f"{sub_group.master.name}.{name}", sub_group.master.numel, torch.float32, Category.OPTIM_STATE)
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.shape != shape:  # step counts stay in memory
                self._ledger.register(value, Category.OPTIM_STATE, Placement.HOST)
        return made


class _SwappedStep:
    """One optimizer step over a SwappedMaster's sub-groups, reading ahead and writing behind."""

    def __init__(self, master: SwappedMaster, optimizer: torch.optim.Optimizer, group_index: int) -> None:
        self.master = master
        self.optimizer = optimizer
        self.group_index = group_index
        self.pool = master._pool
        self.settings = self.pool.settings
        self.reads: deque[_InFlight] = deque()
        self.writes: deque[_InFlight] = deque()
        self.pending = deque(master._sub_groups)
        first = master._sub_groups[0] if master._sub_groups else None
        self.state_count: int | None = len(first.states) if first is not None and first.states else None
        self.stepping: _InFlight | None = None  # read, not yet handed to self.writes

    def run(self) -> None:
        try:
            while self.pending or self.reads:
                if not self.reads:
                    self._read_next()
                current = self.stepping = self.reads.popleft()
                if self.settings.pipeline_read:
                    self._read_ahead()  # queued behind this sub-group's reads, read while it steps
                wait_all(current.transfers)
                self._step(current)
                if not self.settings.pipeline_write:
                    self._finish_write()
            while self.writes:
                self._finish_write()
        finally:
            self._drain()

    def _buffers_needed(self, sub_group: _SubGroup) -> int:
        # A sub-group not stepped before gets buffers for the state its first step makes too, once that is known.
        return 1 + max(len(sub_group.states), self.state_count or 0)

    def _read_next(self) -> None:
        sub_group = self.pending.popleft()
        buffers = self.pool.acquire(self._buffers_needed(sub_group), self._finish_write)
        slots = [sub_group.master, *sub_group.states.values()]
        flight = _InFlight(sub_group, buffers, [])
        self.reads.append(flight)  # before the first read starts: _drain waits for what did start, and frees the buffers
        for slot, buffer in zip(slots, buffers):
            flight.transfers.append(self.pool.read(slot, buffer))

    def _read_ahead(self) -> None:
        """Start reading the next sub-group, finishing the oldest writes to free its buffers (they started a
        sub-group earlier); further ones only while buffers are free. Without the first, a pool full of
        finished writes read nothing ahead, and every read was waited for in full."""
        # Until one sub-group has stepped, how many state tensors a step makes is unknown: read nothing ahead.
        while self.pending and self.state_count is not None:
            reclaimable = 0 if self.reads else sum(len(flight.buffers) for flight in self.writes)
            if self.pool.free + reclaimable < self._buffers_needed(self.pending[0]):
                return
            self._read_next()

    def _step(self, current: _InFlight) -> None:
        sub_group = current.sub_group
        state = self.optimizer.state[sub_group.param]
        self.master.bind(sub_group, current.buffers, state)
        step_one(self.optimizer, self.group_index, sub_group.param)
        made = self.master.new_states(sub_group, state)
        self.state_count = len(sub_group.states)
        missing = 1 + len(sub_group.states) - len(current.buffers)
        if missing > 0:
            self.pool.check_count(1 + len(sub_group.states))
            current.buffers += self.pool.acquire(missing, self._finish_write)
        if made and sub_group is self.master._sub_groups[0]:
            self._warn_if_shallow(sub_group)
        numel = sub_group.master.numel
        slots = [sub_group.master, *sub_group.states.values()]
        sources = [sub_group.param.data, *(state[name] for name in sub_group.states)]
        for buffer, value in zip(current.buffers[1:], sources[1:]):
            if isinstance(value, torch.Tensor) and value.data_ptr() != buffer.data_ptr():
                buffer[:numel].copy_(value)  # made by this step, or replaced by an optimizer that does not work in place
        self._write_back_params(sub_group, current.buffers[0][:numel])
        self.master.unbind(sub_group, state)
        flight = _InFlight(sub_group, current.buffers, [])
        self.writes.append(flight)
        self.stepping = None
        for slot, buffer in zip(slots, current.buffers):
            flight.transfers.append(self.pool.write(slot, buffer))

    def _write_back_params(self, sub_group: _SubGroup, master: torch.Tensor) -> None:
        index = sub_group.tensor_index
        lo, _ = self.master.ranges[index]
        start = lo + sub_group.offset
        flat = self.master.flat
        target_home = flat.home(index)
        target_home.copy_from(flat.owned(index, start, start + master.numel()), master, self.master.home)
        for home in (target_home, self.master.home):
            home.synchronize()  # the buffer is written to swap space next
        if sub_group.offset + master.numel() == self.master.tensors[index].numel:
            flat.commit(index)  # the tensor's last sub-group: all of its parameters are updated

    def _finish_write(self) -> bool:
        if not self.writes:
            return False
        done = self.writes.popleft()
        try:
            wait_all(done.transfers)  # waits for all of them before it raises
        finally:
            self.pool.release(done.buffers)
        return True

    def _drain(self) -> None:
        """After an error: let every transfer finish before its buffer is reused, and give the buffers back."""
        stepping = [self.stepping] if self.stepping is not None else []
        self.stepping = None
        for flight in (*stepping, *self.reads, *self.writes):
            try:
                wait_all(flight.transfers)
            except BaseException:  # noqa: BLE001 - the error that stopped the step is already propagating
                pass
            self.pool.release(flight.buffers)
        self.reads.clear()
        self.writes.clear()

    def _warn_if_shallow(self, sub_group: _SubGroup) -> None:
        needed = self._buffers_needed(sub_group)
        wanted = needed * (1 + self.settings.pipeline_read + self.settings.pipeline_write)
        if wanted > self.settings.buffer_count and (self.settings.pipeline_read or self.settings.pipeline_write):
            warnings.warn(
                f"{self.settings.block_path}: pipeline_read/pipeline_write overlap swapping with the step only when "
                f"buffer_count holds more than one sub-group: the step swaps {needed} tensors per sub-group, so set "
                f"buffer_count to {wanted} (it is {self.settings.buffer_count}); until then sub-groups overlap "
                "only as far as the buffers allow", stacklevel=2)
