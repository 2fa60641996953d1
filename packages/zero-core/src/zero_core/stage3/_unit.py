"""ParamUnit: parameters that are gathered together, stored as one flat padded buffer cut into N shards.

Each rank keeps only its shard (`param.partition`); every parameter's `.data` is an empty
tensor of the right dtype until the unit is gathered, when an all-gather fills a fresh
buffer (`param.gathered`) and the parameters become views into it. Freeing drops the
buffer and empties the parameters again, so the memory dies unless someone else holds it,
which `free()` reports (see _held.py). The engine makes one unit per module and param group
(frozen parameters form their own), `Init` one per module as it is built. Where the shard
lives between uses is its partition's business (_partition.py).

Gathering a shard kept in host memory copies it into its place in the buffer first. Nothing
waits for that copy where the gather starts: the all-gather is issued after it (on CUDA, on
the copy's stream), so a prefetched unit's copy and all-gather overlap the compute of the
unit in use, and only `wait()`, where the parameters are about to be used, waits for both.
"""
from __future__ import annotations

import enum
import weakref
from collections.abc import Sequence

import torch
from zero_plugins import Category

from ..accelerator import COMPLETED, Transfer
from ..comm import Collectives, Work
from ..memory import MemoryLedger
from ..sharding import FlatLayout, MasterCopy
from ._ds_attributes import mark_partitioned, set_status
from ._param_status import ZeroParamStatus
from ._partition import Partition, Partitions
from ._unit_swap import SwappedShard


class UnitState(enum.Enum):
    PARTITIONED = "partitioned"  # only this rank's shard exists; the parameters are empty
    GATHERING = "gathering"  # the buffer exists and its all-gather is in flight
    GATHERED = "gathered"  # the parameters are views of the whole buffer


class ParamUnit:
    def __init__(self, name: str, params: Sequence[torch.nn.Parameter], comm: Collectives, *, dtype: torch.dtype,
                 ledger: MemoryLedger, device: torch.device, partitions: Partitions, swap_name: str = "",
                 master: MasterCopy | None = None) -> None:
        """`params` must hold their full values now; they are read into this rank's partition (which `partitions`
        places; in swap space it is a file named `swap_name`, unique per rank), then emptied. `master`: the fp32
        master of this shard, when the engine keeps one (in memory or in swap space)."""
        self.name = name
        self.layout = FlatLayout(params, comm.world_size)
        self.numel = self.layout.padded_numel
        self.comm = comm
        self.dtype = dtype
        self.ledger = ledger
        self.state = UnitState.PARTITIONED
        self.master = master
        self.buffer: torch.Tensor | None = None
        self.users = 0  # module scopes (forward, backward, GatheredParameters) that need it gathered now
        self._work: Work | None = None
        self._copy: Transfer = COMPLETED  # this rank's shard into its place in the buffer, while gathering
        self._device = device
        self._empty = torch.empty(0, dtype=dtype, device=device)
        self.partition: Partition = partitions.make(name, self.layout, comm.rank, dtype, swap_name=swap_name or name,
                                                    master=master)
        # DeepSpeed's attributes (ds_id, ds_status, ds_numel, ds_shape, ds_tensor), read by programs written for it.
        mark_partitioned(self.layout, self.partition, comm.rank)
        for slot in self.layout.slots:
            setattr(slot.param, "_zero_unit", self)  # unit_of (an attribute torch.nn.Parameter does not declare)
            slot.param.data = self._empty

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return self.layout.params

    @property
    def shard(self) -> torch.Tensor:
        """This rank's partition in memory (empty when it is in swap space or cast from the master)."""
        return self.partition.tensor

    @property
    def swapped(self) -> SwappedShard | None:
        """The partition, when it is in swap space (checkpoints read and write its slot)."""
        return self.partition if isinstance(self.partition, SwappedShard) else None

    @property
    def gathered(self) -> bool:
        """The buffer exists (its all-gather may still be in flight)."""
        return self.state is not UnitState.PARTITIONED

    def start_gather(self) -> None:
        """Allocate the buffer and launch the all-gather of every rank's shard into it."""
        numel, dtype, device = self.numel, self.dtype, self._device
        self.buffer = self.ledger.new(Category.PARAM_GATHERED, lambda: torch.empty(numel, dtype=dtype, device=device))
        lo, hi = self.layout.shard_range(self.comm.rank)
        # Copied into its place (the all-gather runs in place); the all-gather follows the copy, and nothing waits.
        own, self._copy = self.partition.on_device(self.buffer[lo:hi])
        with self._copy.after():
            self._work = self.comm.all_gather(self.buffer, own, async_op=True)
        self.state = UnitState.GATHERING
        set_status(self.layout, ZeroParamStatus.INFLIGHT)

    def wait(self) -> None:
        """Finish the all-gather and point every parameter at its piece of the buffer."""
        if self.state is not UnitState.GATHERING:
            return
        assert self._work is not None and self.buffer is not None
        self._work.wait()
        self._copy.wait()
        self._work, self._copy = None, COMPLETED
        self.state = UnitState.GATHERED
        for slot in self.layout.slots:
            slot.param.data = self.buffer[slot.offset : slot.offset + slot.numel].view(slot.shape)
            setattr(slot.param, "ds_status", ZeroParamStatus.AVAILABLE)

    def free(self) -> weakref.ref[torch.UntypedStorage]:
        """Empty the parameters and drop the buffer; returns a weak reference to the buffer's storage."""
        self.wait()
        assert self.buffer is not None
        for slot in self.layout.slots:
            slot.param.data = self._empty
            setattr(slot.param, "ds_status", ZeroParamStatus.NOT_AVAILABLE)
        storage = weakref.ref(self.buffer.untyped_storage())
        self.buffer = None
        self.state = UnitState.PARTITIONED
        return storage

    def drop(self) -> None:
        """Forget the gathered buffer without touching the parameters, which another unit has taken over."""
        self.wait()
        self.buffer = None
        self.state = UnitState.PARTITIONED

    def store(self, source: torch.Tensor) -> None:
        """Take this rank's shard of `source` (the whole padded flat buffer) as the new partition."""
        lo, hi = self.layout.shard_range(self.comm.rank)
        part = source[lo:hi]
        self.partition.store(part)
        if self.master is not None and not self.partition.cast_from_master:
            self.master.copy_(part.float())

    def read_ahead(self) -> bool:
        """Start reading a partition in swap space ahead of its gather; False when no buffer is free."""
        return self.gathered or self.partition.read_ahead()

    def cancel_read(self) -> None:
        self.partition.cancel_read()

    def __repr__(self) -> str:
        return f"ParamUnit({self.name}, {self.layout.numel} elements)"


def unit_of(param: torch.Tensor) -> ParamUnit | None:
    return getattr(param, "_zero_unit", None)
