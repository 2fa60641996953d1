"""The contract for a param group's compute-dtype parameters, as the master and the optimizer see them."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from ._home import Home
from ._layout import FlatLayout


@runtime_checkable
class FlatStorage(Protocol):
    """Flat storage laid out as `layouts`: stage 0-2's FlatParams, stage 3's persistent buckets plus units."""

    layouts: list[FlatLayout]

    def owned(self, index: int, lo: int, hi: int) -> torch.Tensor:
        """Elements [lo, hi) of layout `index` that this rank steps, 1-D."""
        ...

    def commit(self, index: int) -> None:
        """Every owned element of layout `index` has been written through `owned` (a step's write-back):
        storage that is not memory (a partition in swap space) saves them now."""
        ...

    def cast_from_master(self, index: int) -> bool:
        """Layout `index` keeps no compute-dtype copy of its owned elements: gathers cast the master, so a step's
        write-back skips it."""
        ...

    def home(self, index: int) -> Home:
        """Where layout `index`'s owned elements live (stage 3's partitions may be offloaded)."""
        ...

    def replicated(self) -> list[int]:
        """Indices of the layouts every rank holds whole: all-gathered after each sharded step."""
        ...

    def bucket(self, index: int) -> torch.Tensor:
        """The whole padded flat buffer of replicated layout `index`, 1-D."""
        ...
