"""One optimizer param group's trainable parameters at stage 3, as ZeroOptimizer sees them (`group.flat`).

Persistent parameters (at most `stage3_param_persistence_threshold` elements) stay whole on
every rank in flat reduce buckets, exactly as at stage 2 (FlatParams), and are all-gathered
after each step. The others live in units, one per module, of which a rank holds only its
shard. Layout index i < len(persistent buckets) is a persistent bucket; the rest are units.
"""
from __future__ import annotations

import torch

from ..sharding import FlatLayout, FlatParams, Home
from ._unit import ParamUnit


class Stage3Params:
    """A FlatStorage: persistent buckets (replicated) first, then the units (partitioned)."""

    def __init__(self, persistent: FlatParams | None, units: list[ParamUnit], on_device: Home) -> None:
        self.persistent = persistent
        self._on_device = on_device
        self.units = units
        self.persistent_layouts = list(persistent.layouts) if persistent is not None else []
        self.layouts: list[FlatLayout] = self.persistent_layouts + [unit.layout for unit in units]

    def owned(self, index: int, lo: int, hi: int) -> torch.Tensor:
        """Elements [lo, hi) of layout `index` that this rank steps: a persistent slice, or of a unit's partition."""
        count = len(self.persistent_layouts)
        if index < count:
            assert self.persistent is not None
            return self.persistent.owned(index, lo, hi)
        unit = self.units[index - count]
        start, _ = unit.layout.shard_range(unit.comm.rank)
        return unit.partition.for_update()[lo - start : hi - start]

    def commit(self, index: int) -> None:
        """The step has written all of layout `index`'s owned elements: a partition in swap space goes to its file."""
        count = len(self.persistent_layouts)
        if index >= count:
            self.units[index - count].partition.commit()

    def cast_from_master(self, index: int) -> bool:
        """Layout `index` keeps no compute-dtype copy of its owned elements (gathers cast the master)."""
        count = len(self.persistent_layouts)
        return index >= count and self.units[index - count].partition.cast_from_master

    def home(self, index: int) -> Home:
        count = len(self.persistent_layouts)
        return self.units[index - count].partition.home if index >= count else self._on_device

    def replicated(self) -> list[int]:
        return list(range(len(self.persistent_layouts)))

    def bucket(self, index: int) -> torch.Tensor:
        """A whole persistent bucket (the all-gather after the step writes it)."""
        assert self.persistent is not None and index < len(self.persistent_layouts)
        return self.persistent.bucket(index)
