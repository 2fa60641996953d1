"""Sharded param groups: per optimizer param group, its buckets, flat params, master and gradients."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..memory.ledger import MemoryLedger
from ._flat_params import FlatParams
from ._grads import GradBuckets
from ._layout import FlatLayout, split_into_buckets
from ._master import MasterParams
from ._param_groups import ParamGroup
from ._reducer import ReduceBucket


@dataclass(eq=False)
class ShardedGroup:
    layouts: list[FlatLayout]
    flat: FlatParams
    master: MasterParams
    grads: GradBuckets
    options: dict[str, Any]


@dataclass(frozen=True)
class Placement:
    """Where a rank's state goes: its rank and world size, the stage, the dtypes and the device."""

    rank: int
    world_size: int
    stage: int
    dtype: torch.dtype
    device: torch.device
    bucket_numel: int


def build_group(group: ParamGroup, order: dict[int, int], where: Placement, ledger: MemoryLedger) -> ShardedGroup:
    # Autograd produces gradients roughly in reverse registration order, so buckets are cut
    # in that order and fill one after another during backward.
    params = sorted(group.params, key=lambda p: -order[id(p)])
    sharded = where.stage >= 1
    # Stage 0 never cuts a bucket into shards, so it needs no padding: a layout of one "rank".
    parts = where.world_size if sharded else 1
    layouts = [FlatLayout(bucket, parts) for bucket in split_into_buckets(params, where.bucket_numel)]
    master = None
    if where.dtype != torch.float32:
        master = MasterParams.copy_of(layouts, where.rank, sharded, where.device, ledger)
    flat = FlatParams(layouts, where.dtype, where.device, ledger)
    if master is None:
        master = MasterParams.view_of(flat, where.rank, sharded)
    grads = GradBuckets(layouts, where.rank, where.stage, where.dtype, where.device, ledger)
    return ShardedGroup(layouts, flat, master, grads, dict(group.options))


def reduce_buckets(groups: list[ShardedGroup], order: dict[int, int]) -> list[ReduceBucket]:
    """Every bucket of every group, in the order their gradients are expected to complete."""
    buckets = [ReduceBucket(layout, group.grads, index) for group in groups for index, layout in enumerate(group.layouts)]
    # A bucket completes when its earliest-registered parameter gets its gradient.
    return sorted(buckets, key=lambda b: -min(order[id(slot.param)] for slot in b.layout.slots))
