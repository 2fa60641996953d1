"""Staging buffers for swapped copies, and a 1-D fp32 tensor kept in swap space one sub-group per slot.

With the optimizer state at an NVMe device, the fp32 master and the optimizer state of each
swap slice live in swap slots, and the only memory they take is a pool of `buffer_count`
buffers of one slice each (the ds_config's `offload_optimizer.buffer_count`, as in DeepSpeed;
a slice is at most a sub-group, and small enough that the pool stays within its budget:
zero_plugins.swap_slice_numel). The pool is one allocation, made once, cut at the space's alignment, so each
buffer can be handed to O_DIRECT I/O; transfers move a slot's whole blocks, so none needs a
bounce buffer. A master is written into its slots through one of the buffers, never through
a host copy of the whole tensor.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from zero_plugins import Category

from zero_plugins.ds_config import ConfigError
from ..accelerator import Transfer
from ..offload import SwapSettings, SwapSlot, SwapSpace, SwapTransfer


class SwapPool:
    def __init__(self, space: SwapSpace, settings: SwapSettings) -> None:
        if settings.buffer_count < 1:
            # Each block's own reason: offload_param's buffer_count is not about the optimizer state.
            held = ("the parameter partitions are read into them; set it to at least 1"
                    if settings.block_path.endswith("offload_param") else
                    "the optimizer state is swapped through them; set it to at least 3 for Adam (the master and two "
                    "state tensors per sub-group), more to pipeline reads and writes")
            raise ConfigError(f"{settings.block_path}.buffer_count", f"is 0, but {held}")
        self.space = space
        self.settings = settings
        itemsize = settings.dtype.itemsize
        alignment = self._alignment = space.slot_alignment
        stride = -(-settings.buffer_numel * itemsize // alignment) * alignment // itemsize
        self._memory = space.staging_buffer(stride * settings.buffer_count, settings.dtype)
        # Each buffer spans whole blocks (`stride` elements): `buffer_numel` of values, then padding.
        self._free = [self._memory[i * stride : (i + 1) * stride] for i in range(settings.buffer_count)]
        self._copying: list[tuple[list[torch.Tensor], Transfer]] = []  # released, a device copy still reading them

    def check_count(self, count: int) -> None:
        """A sub-group whose `count` tensors must be in buffers at once fits in the pool."""
        if count > self.settings.buffer_count:
            raise ConfigError(f"{self.settings.block_path}.buffer_count",
                              f"is {self.settings.buffer_count}, but the optimizer's step swaps {count} tensors per "
                              f"sub-group (the fp32 master and {count - 1} state tensor(s)): set it to at least {count}")

    @property
    def free(self) -> int:
        self._reclaim()
        return len(self._free)

    def acquire(self, count: int, make_room: Callable[[], bool]) -> list[torch.Tensor]:
        """`count` free buffers; `make_room()` finishes an earlier transfer to free some (False: nothing to finish)."""
        self.check_count(count)
        self._reclaim()
        while len(self._free) < count:
            if self._copying:
                # Out of buffers: the host waits for the oldest device copy, as it would for a swap write.
                buffers, copy = self._copying.pop(0)
                copy.synchronize()
                self._free.extend(buffers)
            elif not make_room():
                raise RuntimeError(f"swap pool: {count} buffers needed, {len(self._free)} free and no transfer to "
                                   "finish (buffers were not released)")
        taken, self._free = self._free[:count], self._free[count:]
        return taken

    def release(self, buffers: list[torch.Tensor], *, after: Transfer | None = None) -> None:
        """Give buffers back, free again once `after` (a device copy reading them) is complete."""
        if after is None or after.done:
            self._free.extend(buffers)
        else:
            self._copying.append((buffers, after))

    def _reclaim(self) -> None:
        """Buffers whose device copy completed are free (never blocks)."""
        copying, self._copying = self._copying, []
        for buffers, copy in copying:
            self.release(buffers, after=copy)

    def read(self, slot: SwapSlot, buffer: torch.Tensor) -> SwapTransfer:
        """Start reading a slot into a buffer of this pool (its first `slot.numel` elements hold the values)."""
        return self.space.read(slot, self._blocks(slot, buffer))

    def write(self, slot: SwapSlot, buffer: torch.Tensor) -> SwapTransfer:
        """Start writing a buffer of this pool's first `slot.numel` elements into the slot."""
        return self.space.write(slot, self._blocks(slot, buffer))

    def _blocks(self, slot: SwapSlot, buffer: torch.Tensor) -> torch.Tensor:
        # The slot's whole blocks (each buffer spans them): a slot whose bytes end inside a block then moves
        # without the bounce buffer that a view of `slot.numel` elements needs, allocated per transfer.
        itemsize = slot.dtype.itemsize
        blocks = -(-slot.numel * itemsize // self._alignment)
        return buffer[: blocks * self._alignment // itemsize]

    def read_range(self, slot: SwapSlot, lo: int, hi: int) -> torch.Tensor:
        """Elements [lo, hi) of a slot, copied out of one buffer (for a checkpoint's piece of it)."""
        (buffer,) = self.acquire(1, lambda: False)
        try:
            self.read(slot, buffer).wait()
            return buffer[lo:hi].clone()
        finally:
            self.release([buffer])

    def patch(self, slot: SwapSlot, lo: int, values: torch.Tensor) -> None:
        """Overwrite elements [lo, lo + len(values)) of a slot: read, change, write back (a checkpoint's load)."""
        (buffer,) = self.acquire(1, lambda: False)
        try:
            self.read(slot, buffer).wait()
            buffer[lo : lo + values.numel()].copy_(values)
            self.write(slot, buffer).wait()
        finally:
            self.release([buffer])

    def fill(self, slot: SwapSlot, value: float) -> None:
        """Write `value` to every element of a slot (new optimizer state a checkpoint is loaded into)."""
        (buffer,) = self.acquire(1, lambda: False)
        try:
            buffer[: slot.numel].fill_(value)
            self.write(slot, buffer).wait()
        finally:
            self.release([buffer])


class SwappedTensor:
    """A 1-D tensor (of the pool's dtype) in swap space, cut into slots of at most `sub_group_numel` elements
    (the swap slices the optimizer steps; one slot when `sub_group_numel` is None)."""

    def __init__(self, name: str, numel: int, sub_group_numel: int | None, pool: SwapPool, category: Category) -> None:
        self.name = name
        self.numel = numel
        self.pool = pool
        dtype = pool.settings.dtype
        if sub_group_numel is None:
            self.offsets = [0]
            self.slots = [pool.space.reserve(name, numel, dtype, category)]
            return
        sizes = [min(sub_group_numel, numel - start) for start in range(0, numel, sub_group_numel)] or [0]
        self.offsets = [sum(sizes[:k]) for k in range(len(sizes))]
        self.slots = [pool.space.reserve(f"{name}.sub{k}", size, dtype, category) for k, size in enumerate(sizes)]

    def write(self, fill: Callable[[torch.Tensor, int], object]) -> SwappedTensor:
        """Write the values into the slots one slot at a time, through one pool buffer: `fill(view, offset)`
        writes elements [offset, offset + len(view)) into the zeroed view. No host copy of the whole tensor
        is made, so building the master takes no more memory than the pool."""
        (buffer,) = self.pool.acquire(1, lambda: False)
        try:
            for slot, offset in zip(self.slots, self.offsets):
                fill(buffer[: slot.numel].zero_(), offset)
                self.pool.write(slot, buffer).wait()
        finally:
            self.pool.release([buffer])
        return self

    def copy_(self, source: torch.Tensor) -> SwappedTensor:
        """Write `source` (1-D, `numel` elements, in host memory) into the slots."""
        return self.write(lambda view, offset: view.copy_(source[offset : offset + view.numel()]))


def wait_all(transfers: list[SwapTransfer]) -> None:
    """Wait for every transfer, then raise the first error: none is left running on a buffer about to be reused."""
    first: BaseException | None = None
    for transfer in transfers:
        try:
            transfer.wait()
        except BaseException as error:  # noqa: BLE001 - re-raised below, after the others finished
            first = first or error
    if first is not None:
        raise first

