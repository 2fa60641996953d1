"""A unit's partition in swap space (`offload_param.device: nvme`): read ahead into a buffer, written after updates.

Between uses the partition is only a file. Gathering reads it into one of the
`offload_param.buffer_count` buffers (or takes the read the prefetcher started earlier),
copies it into this rank's place in the gathered buffer on the device, and gives the
buffer back to the pool once that copy has read it (the pool waits for the copy only when it
runs out of buffers). The optimizer step writes the updated partition into a buffer opened for the
unit (`for_update`) and `commit` writes it to the file once the last sub-group is in. Its
buffers are host memory at the parameters' offload device (`home`), which copies them to
and from the device.
"""
from __future__ import annotations

import torch
from zero_plugins import Category

from ..accelerator import COMPLETED, Transfer
from ..offload import SwapTransfer
from ..sharding import Home, SwapPool, SwappedTensor


class SwappedShard:
    """A Partition (_partition.py) in swap space."""

    cast_from_master = False

    def __init__(self, name: str, values: torch.Tensor, pool: SwapPool, home: Home) -> None:
        self.pool = pool
        self.home = home
        self.tensor = torch.empty(0, dtype=values.dtype)
        self.swapped = SwappedTensor(name, values.numel(), None, pool, Category.PARAM_PARTITION).copy_(values)
        self.slot = self.swapped.slots[0]
        self._reading: tuple[torch.Tensor, SwapTransfer] | None = None
        self._open: torch.Tensor | None = None
        self._taken: torch.Tensor | None = None

    def values(self) -> torch.Tensor:
        """The partition read into memory (a copy: checkpoints read its slot through their own path)."""
        values = self._take().clone()
        self._give_back(COMPLETED)  # the clone is a host copy, complete on return
        return values

    def read_ahead(self) -> bool:
        """Start reading into a free buffer; False when none is free (the caller stops reading ahead)."""
        if self._reading is not None or self._open is not None:
            return True
        if self.pool.free == 0:
            return False
        (buffer,) = self.pool.acquire(1, lambda: False)
        self._reading = (buffer, self.pool.read(self.slot, buffer))
        return True

    def on_device(self, place: torch.Tensor) -> tuple[torch.Tensor, Transfer]:
        """Read the partition (or take the read started ahead) and start copying it into `place`, on the device."""
        copy = self.home.copy_out(place, self._take())
        self._give_back(copy)
        return place, copy

    def _take(self) -> torch.Tensor:
        """The partition's values in a buffer (read now unless read ahead); hand it back with `_give_back`."""
        if self._reading is None:
            (buffer,) = self.pool.acquire(1, lambda: False)
            self._reading = (buffer, self.pool.read(self.slot, buffer))
        buffer, transfer = self._reading
        self._reading = None
        try:
            transfer.wait()
        except BaseException:
            self.pool.release([buffer])
            raise
        self._taken = buffer
        return buffer[: self.slot.numel]

    def _give_back(self, copy: Transfer) -> None:
        """End of the use `_take` began: the buffer goes back to the pool once `copy` (out of it) is complete."""
        if self._taken is not None:
            buffer, self._taken = self._taken, None
            self.pool.release([buffer], after=copy)

    def cancel_read(self) -> None:
        """Drop a read started ahead that will not be used now (the pass ended): its buffer is needed elsewhere."""
        if self._reading is not None:
            buffer, transfer = self._reading
            self._reading = None
            try:
                transfer.wait()
            finally:
                self.pool.release([buffer])

    def for_update(self) -> torch.Tensor:
        """A buffer the step writes the whole updated partition into (nothing is read: every element is rewritten)."""
        if self._open is None:
            self.cancel_read()
            (self._open,) = self.pool.acquire(1, lambda: False)
        return self._open[: self.slot.numel]

    def store(self, source: torch.Tensor) -> None:
        """Replace the partition with `source` (on the device)."""
        self.cancel_read()
        self.swapped.copy_(source.to("cpu"))

    def commit(self) -> None:
        """Write the buffer opened for the step to the file, and give the buffer back."""
        if self._open is None:
            return
        self.home.synchronize()  # the step's copies into the buffer must be complete
        buffer, self._open = self._open, None
        try:
            self.pool.write(self.slot, buffer).wait()
        finally:
            self.pool.release([buffer])

