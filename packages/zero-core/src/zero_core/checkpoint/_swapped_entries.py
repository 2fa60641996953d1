"""Checkpoint pieces of state that lives in swap files: NVMe-offloaded master and optimizer state, and stage 3's
partitions in swap space. Each piece is the part of one slot that belongs to one parameter, read (for a save) or
patched (for a load) through one pool buffer."""
from __future__ import annotations

from functools import partial

import torch

from ..sharding import FlatLayout, SwappedMaster, param_name
from ..stage3 import ParamUnit
from ._pieces import EntryBuilder, LazyPiece


def add_swapped_master(builder: EntryBuilder, layouts: list[FlatLayout], master: SwappedMaster,
                       with_state: bool) -> None:
    pool = master.pool
    names = master.state_names() if with_state else []
    for index, layout in enumerate(layouts):
        lo, hi = master.ranges[index]
        for layout_slot in layout.slots:
            for kind in ("master", *(f"optim.{name}" for name in names)):
                builder.declare(f"{kind}.{param_name(layout_slot.param)}", layout_slot.numel, lazy=True)
        sub_groups = master.slots_of(index)
        for piece in layout.pieces_in(lo, hi):
            name, numel = param_name(piece.slot.param), piece.slot.numel
            first, last = piece.shard_offset, piece.shard_offset + piece.stop - piece.start
            for offset, master_slot, state_slots in sub_groups:
                x0, x1 = max(first, offset), min(last, offset + master_slot.numel)
                if x0 >= x1:
                    continue
                start, a, b = piece.start + x0 - first, x0 - offset, x1 - offset
                slots = {"master": master_slot, **{f"optim.{n}": state_slots[n] for n in names}}
                for kind, slot in slots.items():
                    builder.lazy(f"{kind}.{name}", LazyPiece(start, b - a, partial(pool.read_range, slot, a, b),
                                                             partial(pool.patch, slot, a)))


def add_swapped_unit(builder: EntryBuilder, key: str, numel: int, unit: ParamUnit, param: torch.nn.Parameter,
                     rank: int) -> None:
    """`model.<fqn>` pieces of a stage-3 partition in swap space."""
    assert unit.swapped is not None
    pool, slot = unit.swapped.pool, unit.swapped.slot
    builder.declare(key, numel, unit.dtype, lazy=True)
    lo, hi = unit.layout.shard_range(rank)
    for piece in unit.layout.pieces_in(lo, hi):
        if piece.slot.param is param:
            a, b = piece.shard_offset, piece.shard_offset + piece.stop - piece.start
            builder.lazy(key, LazyPiece(piece.start, b - a, partial(pool.read_range, slot, a, b),
                                        partial(pool.patch, slot, a)))
