"""Several small reduce buckets reduced by one reduce-scatter (stage 3, where each unit is a bucket).

Each member keeps its own layout, padding and gradient partition; the packed buffer lays
their shards out rank by rank (rank 0's shard of every member, then rank 1's, ...), so one
reduce-scatter leaves this rank's shard of every member side by side in its own chunk. The
sums and the bytes sent are the members' own; only the number of collectives drops, which
matters on backends with a high cost per call (gloo on CPU).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from zero_plugins.placement import stage3_bucket_cap

from ..accelerator import Transfer
from ._bucket import LayoutBucket, ReduceBucket
from ._layout import Slot


class PackedBucket:
    """A ReduceBucket over several LayoutBuckets."""

    def __init__(self, members: Sequence[LayoutBucket], world_size: int) -> None:
        self.members = list(members)
        self.buffer: torch.Tensor | None = None
        self.arrived: set[int] = set()
        self.launched = False
        self.slots: list[Slot] = [slot for m in self.members for slot in m.layout.slots]
        self._offsets: list[int] = []  # where each member's shard starts within a rank's chunk
        chunk = 0
        for member in self.members:
            self._offsets.append(chunk)
            chunk += member.layout.shard_numel
        self._chunk = chunk
        self.padded_numel = chunk * world_size
        # per slot: (position in the packed buffer, start, stop) of each piece of its flattened gradient
        self._pieces: list[list[tuple[int, int, int]]] = []
        for member, offset in zip(self.members, self._offsets):
            layout = member.layout
            for slot in layout.slots:
                pieces = []
                for rank in range(world_size):
                    lo, hi = layout.shard_range(rank)
                    start, stop = max(lo, slot.offset), min(hi, slot.offset + slot.numel)
                    if start < stop:
                        pieces.append((rank * chunk + offset + start - lo, start - slot.offset, stop - slot.offset))
                self._pieces.append(pieces)

    def new_buffer(self) -> torch.Tensor:
        grads = self.members[0].grads
        return torch.zeros(self.padded_numel, dtype=grads.dtype, device=grads.device)

    def write(self, buffer: torch.Tensor, index: int, grad: torch.Tensor, *, accumulate: bool) -> None:
        for at, start, stop in self._pieces[index]:
            target = buffer[at : at + stop - start]
            if accumulate:
                target.add_(grad[start:stop])
            else:
                target.copy_(grad[start:stop])

    def shard_range(self, rank: int) -> tuple[int, int]:
        return rank * self._chunk, (rank + 1) * self._chunk

    def complete(self, buffer: torch.Tensor, rank: int) -> list[Transfer]:
        base = rank * self._chunk
        transfers = []
        for member, offset in zip(self.members, self._offsets):
            numel = member.layout.shard_numel
            transfers.append(member.grads.accumulate(member.index, buffer[base + offset : base + offset + numel]))
        return transfers


def pack_buckets(buckets: Sequence[LayoutBucket], max_numel: int, world_size: int) -> list[ReduceBucket]:
    """Consecutive buckets (in launch order) packed while together they hold at most `max_numel` elements.

    `max_numel` is reduce_bucket_size, and stage3_bucket_cap keeps a bucket within the largest unit or
    LATENCY_BOUND_NUMEL, whichever is larger (docs/engine.md, "Stage 3"). A unit larger than that is alone.
    """
    limit = stage3_bucket_cap(max((b.layout.padded_numel for b in buckets), default=0), max_numel)
    packed: list[ReduceBucket] = []
    run: list[LayoutBucket] = []

    def close() -> None:
        if len(run) == 1:
            packed.append(run[0])  # alone: reduced exactly as before
        elif run:
            packed.append(PackedBucket(run, world_size))
        run.clear()

    for bucket in buckets:
        if run and sum(b.layout.padded_numel for b in run) + bucket.layout.padded_numel > limit:
            close()
        run.append(bucket)
    close()
    return packed
