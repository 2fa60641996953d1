"""Flat layouts: where each parameter sits in a flat buffer, and which slice each rank owns.

A FlatLayout lays a list of parameters end to end, pads the total to a multiple of the
world size N, and cuts it into N equal shards. The padding is at most N-1 elements, and a
layout smaller than N still gets one element per rank, because gloo aborts on empty
gathers. Stages 1-2 use one layout per reduce bucket; stage 3 uses one per module. Only
arithmetic lives here: which tensors hold the data is up to the caller.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Slot:
    """One parameter's place in a layout: elements [offset, offset + numel)."""

    param: torch.nn.Parameter
    offset: int
    numel: int
    shape: torch.Size


@dataclass(frozen=True)
class ShardPiece:
    """The part of one slot inside one rank's shard.

    Elements [start, stop) of the flattened parameter sit at [shard_offset, shard_offset + stop - start)
    of the shard.
    """

    slot: Slot
    start: int
    stop: int
    shard_offset: int


class FlatLayout:
    def __init__(self, params: Sequence[torch.nn.Parameter], world_size: int) -> None:
        if not params:
            raise ValueError("a flat layout needs at least one parameter")
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1 (got {world_size})")
        slots = []
        offset = 0
        for param in params:
            slots.append(Slot(param, offset, param.numel(), param.shape))
            offset += param.numel()
        self.slots: tuple[Slot, ...] = tuple(slots)
        self.world_size = world_size
        self.numel = offset
        self.shard_numel = max(-(-offset // world_size), 1)
        self.padded_numel = self.shard_numel * world_size

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return [slot.param for slot in self.slots]

    @property
    def padding(self) -> int:
        return self.padded_numel - self.numel

    def shard_range(self, rank: int) -> tuple[int, int]:
        """[start, stop) of rank's shard within the padded flat buffer."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside 0..{self.world_size - 1}")
        return rank * self.shard_numel, (rank + 1) * self.shard_numel

    def pieces_in(self, lo: int, hi: int) -> list[ShardPiece]:
        """The parameter pieces inside [lo, hi) of the flat buffer, in order; shard_offset counts from lo.

        Padding is covered by no piece."""
        pieces = []
        for slot in self.slots:
            start = max(lo, slot.offset)
            stop = min(hi, slot.offset + slot.numel)
            if start < stop:
                pieces.append(ShardPiece(slot, start - slot.offset, stop - slot.offset, start - lo))
        return pieces


def split_into_buckets(params: Sequence[torch.nn.Parameter], max_numel: int) -> list[list[torch.nn.Parameter]]:
    """Consecutive groups of at most `max_numel` elements; a larger parameter gets a group of its own."""
    if max_numel < 1:
        raise ValueError(f"bucket size must be >= 1 element (got {max_numel})")
    buckets: list[list[torch.nn.Parameter]] = []
    current: list[torch.nn.Parameter] = []
    size = 0
    for param in params:
        if current and size + param.numel() > max_numel:
            buckets.append(current)
            current, size = [], 0
        current.append(param)
        size += param.numel()
    if current:
        buckets.append(current)
    return buckets
