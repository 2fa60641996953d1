"""The checkpoint's tensors, by name, laid out independently of the world size and the stage.

Every parameter is saved as a 1-D tensor of its `numel` elements, under its fully qualified
name and a kind: `model.<fqn>` (compute dtype), `master.<fqn>` (fp32), `optim.<state>.<fqn>`
(each of the optimizer's param-sized state tensors). What a rank holds of one is a set of
pieces (element ranges): the whole tensor where every rank holds it whole (stages 0-2's
weights, stage 0's master and state), or this rank's pieces of its shards (stage 3's
partitions; stages 1-3's master and state), given to torch.distributed.checkpoint (DCP) as a
ShardedTensor of 1-D chunks. DCP then reads back, for any other layout, exactly the elements
each rank needs: that is the resharding across world sizes and stages. The pieces are views
of the engine's own buffers, so saving copies nothing in memory and loading writes in place.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..sharding import MasterParams, SwappedMaster, ZeroOptimizer, param_name
from ..stage3 import Partition, unit_of
from ._pieces import EntryBuilder
from ._swapped_entries import add_swapped_master, add_swapped_unit

@dataclass
class ModelNames:
    """What the checkpoint's description lists of the model."""

    params: dict[str, list[int]]  # fqn -> shape
    buffers: dict[str, list[int]]
    tied: dict[str, str]  # a tied parameter's other name -> the name it is saved under
    # Partitions cast from the master, with the 16-bit values a load writes into and their parameters' fqns: the
    # master is the weights, so these values are kept only when the checkpoint has no master for them.
    cast: list[tuple[Partition, torch.Tensor, list[str]]]


def add_model(builder: EntryBuilder, module: torch.nn.Module, rank: int, include_frozen: bool) -> ModelNames:
    """`model.<fqn>` for every parameter (tied ones once, by their first name) and `buffer.<fqn>` for every
    persistent buffer."""
    shapes: dict[str, list[int]] = {}
    # by id(unit): its partition, the partition's 16-bit values, and the fqns of its parameters seen so far
    shards: dict[int, tuple[Partition, torch.Tensor, list[str]]] = {}
    for name, param in module.named_parameters():
        if not include_frozen and not param.requires_grad:
            continue
        unit = unit_of(param)
        shape = list(getattr(param, "ds_shape", param.shape))
        shapes[name] = shape
        numel = int(torch.Size(shape).numel())
        key = f"model.{name}"
        if unit is None:
            builder.whole(key, param.data)
            continue
        if unit.swapped is not None:
            add_swapped_unit(builder, key, numel, unit, param, rank)
            continue
        lo, hi = unit.layout.shard_range(rank)
        builder.declare(key, numel)
        if id(unit) not in shards:  # a partition cast from the master is cast here, once: 16-bit, as it gathers
            shards[id(unit)] = (unit.partition, unit.partition.values(), [])
        _, shard, fqns = shards[id(unit)]
        fqns.append(name)
        for piece in unit.layout.pieces_in(lo, hi):
            if piece.slot.param is param:
                length = piece.stop - piece.start
                builder.part(key, numel, piece.start, shard[piece.shard_offset : piece.shard_offset + length])
    buffers: dict[str, list[int]] = {}
    for name, buffer in module.named_buffers():
        if _persistent(module, name):
            builder.whole(f"buffer.{name}", buffer)
            buffers[name] = list(buffer.shape)
    first: dict[int, str] = {}
    tied: dict[str, str] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        if id(param) in first:
            tied[name] = first[id(param)]
        else:
            first[id(param)] = name
    cast = [entry for entry in shards.values() if entry[0].cast_from_master]
    return ModelNames(shapes, buffers, tied, cast)


def add_optimizer(builder: EntryBuilder, optimizer: ZeroOptimizer, sharded: bool, with_state: bool) -> None:
    """`master.<fqn>` and, `with_state`, `optim.<state>.<fqn>` for every trainable parameter."""
    for group in optimizer.groups:
        master = group.master
        if isinstance(master, SwappedMaster):
            add_swapped_master(builder, group.layouts, master, with_state)
            continue
        state_names = sorted({name for param in master.optimizer_params
                              for name, value in optimizer.state.get(param, {}).items()
                              if isinstance(value, torch.Tensor) and value.shape == param.shape}) if with_state else []
        for index, layout in enumerate(group.layouts):
            lo, hi = master.ranges[index]
            if sharded:  # every rank makes every key's ShardedTensor, holding a piece of it or not
                for slot in layout.slots:
                    for kind in ("master", *(f"optim.{state}" for state in state_names)):
                        builder.declare(f"{kind}.{param_name(slot.param)}", slot.numel)
            for piece in layout.pieces_in(lo, hi):
                name, numel = param_name(piece.slot.param), piece.slot.numel
                length = piece.stop - piece.start
                values = master.tensors[index][piece.shard_offset : piece.shard_offset + length]
                _add(builder, f"master.{name}", numel, piece.start, values, sharded)
                if with_state:
                    for state_name, start, state_values in _state_pieces(optimizer, master, index,
                                                                         piece.shard_offset, length):
                        _add(builder, f"optim.{state_name}.{name}", numel, piece.start + start, state_values, sharded)


def _state_pieces(optimizer: ZeroOptimizer, master: MasterParams, index: int, offset: int,
                  length: int) -> Iterator[tuple[str, int, torch.Tensor]]:
    """(state name, first element relative to the piece, view) of the state tensors covering a master range."""
    for param, sub_offset in master.sub_groups(index):
        lo, hi = max(offset, sub_offset), min(offset + length, sub_offset + param.numel())
        if lo >= hi:
            continue
        for state_name, value in optimizer.state.get(param, {}).items():
            if isinstance(value, torch.Tensor) and value.shape == param.shape:
                yield state_name, lo - offset, value[lo - sub_offset : hi - sub_offset]


def _add(builder: EntryBuilder, key: str, numel: int, start: int, values: torch.Tensor, sharded: bool) -> None:
    if sharded:
        builder.part(key, numel, start, values)
    else:
        builder.whole(key, values)  # stage 0: every rank steps every element


def _persistent(module: torch.nn.Module, name: str) -> bool:
    owner_name, _, leaf = name.rpartition(".")
    owner = module.get_submodule(owner_name) if owner_name else module
    return leaf not in owner._non_persistent_buffers_set


def keep_loaded_casts(names: ModelNames, saved_keys: set[str]) -> None:
    """A checkpoint without the master (an export, fp32 weights): the loaded 16-bit values become the master of
    partitions cast from it, which would otherwise drop them."""
    for partition, values, fqns in names.cast:
        if any(f"master.{fqn}" not in saved_keys for fqn in fqns) and all(f"model.{fqn}" in saved_keys
                                                                          for fqn in fqns):
            partition.store(values)
