"""Reduce buckets: the gradients one collective averages, as the reducer sees them.

`ReduceBucket` is what every bucket offers the reducer when gradients are reduced in
every backward through a transient buffer (stages 2 and 3). `WholeGradBucket` adds what
stages 0-1 need, where a bucket's whole gradient stays in the group's storage until the
boundary. `LayoutBucket` is one FlatLayout of a param group; stage 3 packs several of
them into one collective (_packed_bucket.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from ..accelerator import Transfer
from ._grads import GradBuckets
from ._layout import FlatLayout, Slot


@runtime_checkable
class ReduceBucket(Protocol):
    slots: list[Slot]  # the parameters whose gradients it carries; a gradient hook names its slot index
    arrived: set[int]  # slot indices whose gradient arrived in this backward
    launched: bool  # its collective was issued in this backward
    buffer: torch.Tensor | None  # the transient full-size gradient while filling and reducing

    def new_buffer(self) -> torch.Tensor:
        """A zeroed transient buffer (padding and unused parameters stay zero)."""
        ...

    def write(self, buffer: torch.Tensor, index: int, grad: torch.Tensor, *, accumulate: bool) -> None:
        """Put slot `index`'s flattened gradient in its place(s) in `buffer` (or add it there)."""
        ...

    def shard_range(self, rank: int) -> tuple[int, int]:
        """[start, stop) of `rank`'s part of the buffer after the reduce-scatter."""
        ...

    def complete(self, buffer: torch.Tensor, rank: int) -> list[Transfer]:
        """Start adding this rank's reduced part of `buffer` to its gradient partition(s); the copies in flight."""
        ...


@runtime_checkable
class WholeGradBucket(ReduceBucket, Protocol):
    def take_grad(self, index: int, param: torch.nn.Parameter) -> None:
        """Keep slot `index`'s gradient in the bucket's whole gradient (`param.grad` becomes a view of it)."""
        ...

    def whole_grad(self) -> torch.Tensor:
        """The bucket's whole gradient, reduced in place."""
        ...

    def owned_grad(self) -> torch.Tensor:
        """The part of the whole gradient this rank steps with."""
        ...


@dataclass(eq=False, kw_only=True)
class LayoutBucket:
    """Bucket `index` of a param group's gradients (`grads`), laid out as `layout`."""

    layout: FlatLayout
    grads: GradBuckets
    index: int
    buffer: torch.Tensor | None = None
    arrived: set[int] = field(default_factory=set)
    launched: bool = False
    slots: list[Slot] = field(init=False)

    def __post_init__(self) -> None:
        self.slots = list(self.layout.slots)

    def new_buffer(self) -> torch.Tensor:
        return torch.zeros(self.layout.padded_numel, dtype=self.grads.dtype, device=self.grads.device)

    def write(self, buffer: torch.Tensor, index: int, grad: torch.Tensor, *, accumulate: bool) -> None:
        slot = self.slots[index]
        target = buffer[slot.offset : slot.offset + slot.numel]
        if accumulate:
            target.add_(grad)
        else:
            target.copy_(grad)

    def shard_range(self, rank: int) -> tuple[int, int]:
        return self.layout.shard_range(rank)

    def complete(self, buffer: torch.Tensor, rank: int) -> list[Transfer]:
        lo, hi = self.layout.shard_range(rank)
        return [self.grads.accumulate(self.index, buffer[lo:hi])]

    def take_grad(self, index: int, param: torch.nn.Parameter) -> None:
        self.grads.take(self.index, index, param)

    def whole_grad(self) -> torch.Tensor:
        return self.grads.get(self.index)

    def owned_grad(self) -> torch.Tensor:
        return self.grads.owned(self.index)
