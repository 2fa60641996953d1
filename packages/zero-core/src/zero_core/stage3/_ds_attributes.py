"""DeepSpeed's attributes on stage-3 parameters, with DeepSpeed's meaning (docs/integrations.md).

Programs written for DeepSpeed test `hasattr(param, "ds_id")` to know a parameter is partitioned
and gather only those whose `ds_status` is `NOT_AVAILABLE` (DeepSpeed-Chat's LoRA fuse and
stage-3 save); they size models with `ds_numel` and shape LoRA factors with `ds_shape`.

- `ds_id`: an int unique in the process, given once, in build order (the same on every rank).
- `ds_status`: a ZeroParamStatus that the unit keeps current as it gathers and frees.
- `ds_numel` / `ds_shape`: the whole parameter's, also while it is partitioned.
- `ds_tensor`: this rank's elements of the parameter, flat. A unit cuts one flat buffer of its
  parameters (not each parameter) into shards, so it may hold fewer than
  ceil(numel / world_size) elements, or none. Where the partition is cast from the fp32 master it is
  that master's elements (fp32); in swap space, an empty tensor, as its values are only on disk
  between uses. A persistent parameter is whole on every rank: all of it, AVAILABLE always.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable

import torch

from ..sharding import FlatLayout
from ._param_status import ZeroParamStatus
from ._partition import MasterCastPartition, Partition

_ids = itertools.count()


def _give_id(param: torch.nn.Parameter) -> None:
    # Kept when the parameter already has one: an Init unit's parameters keep theirs in the engine's unit.
    if not isinstance(getattr(param, "ds_id", None), int):
        setattr(param, "ds_id", next(_ids))


def _resident(partition: Partition) -> torch.Tensor:
    """What a rank keeps of the partition between gathers, flat."""
    if isinstance(partition, MasterCastPartition):
        return partition.master
    return partition.tensor


def mark_partitioned(layout: FlatLayout, partition: Partition, rank: int) -> None:
    """A new unit's parameters: partitioned, each with a view of its elements in this rank's partition."""
    lo, hi = layout.shard_range(rank)
    resident = _resident(partition)
    for slot in layout.slots:
        param = slot.param
        _give_id(param)
        setattr(param, "ds_numel", slot.numel)
        setattr(param, "ds_shape", slot.shape)
        setattr(param, "ds_persist", False)
        setattr(param, "ds_status", ZeroParamStatus.NOT_AVAILABLE)
        start, stop = max(lo, slot.offset) - lo, min(hi, slot.offset + slot.numel) - lo
        setattr(param, "ds_tensor", resident[start:stop] if resident.numel() and start < stop else resident[0:0])


def mark_persistent(params: Iterable[torch.nn.Parameter]) -> None:
    """Parameters kept whole on every rank (`stage3_param_persistence_threshold`), after they took their place."""
    for param in params:
        _give_id(param)
        setattr(param, "ds_numel", param.numel())
        setattr(param, "ds_shape", param.shape)
        setattr(param, "ds_persist", True)
        setattr(param, "ds_status", ZeroParamStatus.AVAILABLE)
        setattr(param, "ds_tensor", param.data.view(-1))


def set_status(layout: FlatLayout, status: ZeroParamStatus) -> None:
    for slot in layout.slots:
        setattr(slot.param, "ds_status", status)
