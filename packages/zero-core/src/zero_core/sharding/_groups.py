"""Sharded param groups: per optimizer param group, its buckets, flat params, master and gradients."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from ._bucket import LayoutBucket
from ._build_steps import BuildContext
from ._flat_params import FlatParams
from ._grads import GradBuckets
from ._layout import FlatLayout, split_into_buckets
from ._master import MasterParams, copy_owned, owned_range
from ._param_groups import ParamGroup
from ._storage import FlatStorage
from ._swapped_master import SwappedMaster


@dataclass(eq=False)
class ShardedGroup:
    layouts: list[FlatLayout]
    flat: FlatStorage
    master: MasterParams | SwappedMaster  # each a Master; checkpoints read each kind's own layout
    grads: GradBuckets
    options: dict[str, Any]


def build_group(group: ParamGroup, group_index: int, context: BuildContext) -> ShardedGroup:
    """Stages 0-2: the group's parameters whole on every rank, in flat buckets."""
    params = in_gradient_order(group.params, context)
    sharded = context.policy.shards_optimizer_state
    # A stage that steps whole buckets never cuts them into shards, so it needs no padding: a layout of one "rank".
    parts = context.world_size if sharded else 1
    layouts = [FlatLayout(bucket, parts) for bucket in split_into_buckets(params, context.bucket_numel)]
    ranges = [owned_range(layout, context.rank, sharded=sharded) for layout in layouts]
    # The master's copies are read from the parameters before they are flattened (and cast).
    copies = [context.homes.masters.copy(f"group{group_index}.bucket{index}", hi - lo,
                                         partial(copy_owned, layout=layout, lo=lo, hi=hi))
              for index, (layout, (lo, hi)) in enumerate(zip(layouts, ranges))]
    flat = FlatParams(layouts, context.dtype, context.homes.on_device)
    master = context.homes.masters.assemble(copies, ranges, flat)
    grads = GradBuckets(layouts, context.rank, context.policy, context.dtype, context.homes)
    return ShardedGroup(layouts, flat, master, grads, dict(group.options))


def in_gradient_order(params: list[torch.nn.Parameter], context: BuildContext) -> list[torch.nn.Parameter]:
    """Autograd produces gradients roughly in reverse registration order, so buckets are cut in that
    order and fill one after another during backward."""
    return sorted(params, key=lambda p: -context.order[id(p)])


def layout_buckets(groups: list[ShardedGroup], context: BuildContext) -> list[LayoutBucket]:
    """Every bucket of every group, in the order their gradients are expected to complete."""
    buckets = [LayoutBucket(layout=layout, grads=group.grads, index=index) for group in groups for index, layout in enumerate(group.layouts)]
    # A bucket completes when its earliest-registered parameter gets its gradient.
    return sorted(buckets, key=lambda b: -min(context.order[id(slot.param)] for slot in b.slots))
