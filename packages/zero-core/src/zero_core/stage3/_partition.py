"""A unit's partition (this rank's shard of its 16-bit parameters) at its home, and where each one goes.

A partition lives in memory at a `Home` (on the device, or in host memory at `offload_param`'s
device) or, past `offload_param.max_in_cpu` on an NVMe device, in swap space (SwappedShard,
_unit_swap.py). Where the placement plan keeps none (16-bit compute, the master on the device,
nothing offloaded), a trainable unit's partition is its fp32 master shard (MasterCastPartition). The unit only asks its partition; `Partitions` picks each one's place once,
as the unit is built.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from zero_plugins import Category

from zero_plugins.ds_config import ConfigError
from ..accelerator import COMPLETED, Transfer
from ..sharding import FlatLayout, Home, Homes, MasterCopy, SwapPool, copy_owned
from ._unit_swap import SwappedShard


class Partition(Protocol):
    home: Home  # where the values a step writes (`for_update`) live
    tensor: torch.Tensor  # the partition in memory (empty when it is in swap space or cast from the master)
    cast_from_master: bool  # no copy is kept: gathers cast the fp32 master, and a step writes nothing back

    def values(self) -> torch.Tensor:
        """The values in memory, in the compute dtype (a fresh cast of the master when no copy is kept)."""
        ...

    def on_device(self, place: torch.Tensor) -> tuple[torch.Tensor, Transfer]:
        """The values on the device: the partition itself, or copied into `place` (this rank's part of the
        gathered buffer, so that the all-gather runs in place), with the copy in flight (not waited for)."""
        ...

    def store(self, source: torch.Tensor) -> None:
        """Replace the values with `source` (on the device)."""
        ...

    def for_update(self) -> torch.Tensor:
        """A tensor at `home` the step writes every element of; `commit` after the last write."""
        ...

    def commit(self) -> None:
        ...

    def read_ahead(self) -> bool:
        """Start reading ahead of a gather; False when no buffer is free (the caller stops reading ahead)."""
        ...

    def cancel_read(self) -> None:
        ...


class InMemoryPartition:
    cast_from_master = False

    def __init__(self, tensor: torch.Tensor, home: Home) -> None:
        self.tensor = tensor
        self.home = home

    def values(self) -> torch.Tensor:
        return self.tensor

    def on_device(self, place: torch.Tensor) -> tuple[torch.Tensor, Transfer]:
        return self.home.on_device(self.tensor, place)

    def store(self, source: torch.Tensor) -> None:
        self.home.copy_in(self.tensor, source)
        self.home.synchronize()

    def for_update(self) -> torch.Tensor:
        return self.tensor

    def commit(self) -> None:
        """Nothing to save: the partition is memory."""

    def read_ahead(self) -> bool:
        return True

    def cancel_read(self) -> None:
        """Nothing is read ahead."""


class MasterCastPartition:
    """A partition the placement plan keeps no copy of: its values are the fp32 master shard on the device, cast
    into this rank's place in the gathered buffer at every gather, as FSDP2 casts its fp32 shard. The cast equals
    what writing the master back after each step would have stored, so training is unchanged, and a rank holds
    2 bytes per element less between gathers."""

    cast_from_master = True

    def __init__(self, master: torch.Tensor, dtype: torch.dtype, home: Home) -> None:
        self.master = master
        self.home = home
        self.tensor = torch.empty(0, dtype=dtype, device=master.device)

    def values(self) -> torch.Tensor:
        return self.master.to(self.tensor.dtype)

    def on_device(self, place: torch.Tensor) -> tuple[torch.Tensor, Transfer]:
        place.copy_(self.master)  # on the device, on the compute stream: nothing in flight
        return place, COMPLETED

    def store(self, source: torch.Tensor) -> None:
        self.master.copy_(source)

    def for_update(self) -> torch.Tensor:
        raise AssertionError("a partition cast from the master is never written back (see cast_from_master)")

    def commit(self) -> None:
        """Nothing to save: the master is the values."""

    def read_ahead(self) -> bool:
        return True

    def cancel_read(self) -> None:
        """Nothing is read ahead."""


class Partitions:
    """Makes each unit's partition at its home. With swap space (`offload_param.device: nvme`) the first
    `max_in_cpu` elements (of this rank's partitions, in module order) stay in host memory, as in DeepSpeed,
    and every later partition goes to swap space."""

    def __init__(self, home: Home, *, swap_pool: Callable[[], SwapPool] | None = None, max_in_cpu: int = 0,
                 cast_from_master: bool = False) -> None:
        """`swap_pool`: the buffers of the home's swap space, when it has one (allocated when first asked for);
        `cast_from_master`: the plan keeps no partition of trainable units, whose gathers cast the master."""
        self.home = home
        self.cast_from_master = cast_from_master
        self.swap_pool = swap_pool
        self.max_in_cpu = max_in_cpu
        self.in_cpu = 0
        self.swapping = False

    @classmethod
    def at(cls, homes: Homes, *, max_in_cpu: int) -> Partitions:
        """The engine's partitions, at the parameters' home."""
        swap_pool = homes.partition_pool if homes.partition_space is not None else None
        return cls(homes.parameters, swap_pool=swap_pool, max_in_cpu=max_in_cpu,
                   cast_from_master=homes.params_cast_from_master)

    def make(self, name: str, layout: FlatLayout, rank: int, dtype: torch.dtype, *, swap_name: str,
             master: MasterCopy | None = None) -> Partition:
        """Rank's shard of unit `name`'s layout (whose parameters hold full values now), padding zeroed; in swap
        space its file is named `swap_name` (unique per rank). `master`: the unit's fp32 master shard (trainable
        units), which is the partition itself where the plan casts gathers from it."""
        numel = layout.shard_numel
        if self.cast_from_master and isinstance(master, torch.Tensor):
            return MasterCastPartition(master, dtype, self.home)
        if self.swap_pool is None or not self._goes_to_swap(numel):
            return InMemoryPartition(fill_shard(self.home.allocate(numel, dtype, Category.PARAM_PARTITION),
                                                layout=layout, rank=rank), self.home)
        pool = self.swap_pool()
        if numel > pool.settings.buffer_numel:
            raise ConfigError(f"{pool.settings.block_path}.buffer_size",
                              f"is {pool.settings.buffer_numel} elements, below the {numel} of {name}'s partition, "
                              f"which is read into one buffer; raise it to at least {numel}")
        return SwappedShard(swap_name, fill_shard(torch.zeros(numel, dtype=dtype), layout=layout, rank=rank), pool,
                            self.home)

    def _goes_to_swap(self, numel: int) -> bool:
        if not self.swapping and self.in_cpu + numel <= self.max_in_cpu:
            self.in_cpu += numel
            return False
        self.swapping = True
        return True


def fill_shard(shard: torch.Tensor, start: int = 0, *, layout: FlatLayout, rank: int) -> torch.Tensor:
    """Copy rank's part of the layout's parameters (which hold full values now), from its `start`-th element on,
    into a zeroed `shard`."""
    lo, hi = layout.shard_range(rank)
    return copy_owned(shard, start, layout=layout, lo=lo, hi=hi)
