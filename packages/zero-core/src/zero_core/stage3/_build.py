"""Build stage 3's sharded state: persistent and partitioned parameters, units, buckets and gather hooks.

Per module (in `named_modules` order) the parameters it registers first are cut into
units: one per optimizer param group, and one for its frozen parameters, so a unit's
shard is exactly what its optimizer group steps. Parameters at or below
`stage3_param_persistence_threshold` elements stay whole (stage 2's flat buckets). A
parameter that another module registers too (a tied weight) belongs to its first module's
unit, which the other module gathers as well. Parameters already partitioned by
`zero_core.Init` are gathered one module at a time while their units are built, so no rank
ever holds the whole model.
"""
from __future__ import annotations

from functools import partial
from typing import Any

import torch
from zero_plugins.placement import Copy

from ..sharding import (
    BuildContext,
    FlatLayout,
    FlatParams,
    GradBuckets,
    MasterCopy,
    ParamGroup,
    ShardedGroup,
    ShardedState,
    broadcast_initial_weights,
    copy_owned,
    in_gradient_order,
    layout_buckets,
    pack_buckets,
    place_buffers,
    place_frozen,
    split_into_buckets,
)
from ._coordinator import GatherCoordinator
from ._ds_attributes import mark_persistent
from ._held import HeldMemoryDetector
from ._hooks import ModuleHooks
from ._params import Stage3Params
from ._partition import Partitions, fill_shard
from ._passes import GatheringPasses
from ._unit import ParamUnit, unit_of


def build_stage3_state(model: torch.nn.Module, param_groups: list[ParamGroup], context: BuildContext) -> ShardedState:
    zero = context.config.zero_optimization
    # Init already broadcast what it partitioned.
    broadcast_initial_weights([t for t in [*model.parameters(), *model.buffers()] if unit_of(t) is None],
                              context.comm)
    place_buffers(model, context)
    group_of = {id(p): index for index, group in enumerate(param_groups) for p in group.params}
    units, group_units, group_masters = _build_units(model, group_of, len(param_groups), context)
    groups = []
    for index, group in enumerate(param_groups):
        persistent = [p for p in group.params if unit_of(p) is None]
        groups.append(_sharded_group(index, persistent, group_units[index], group_masters[index], group.options,
                                     context))
    # one bucket per unit, packed up to reduce_bucket_size elements so that a block's small units share a collective
    buckets = pack_buckets(layout_buckets(groups, context), zero.reduce_bucket_size, context.world_size)
    coordinator = GatherCoordinator(HeldMemoryDetector(context.ledger), zero.stage3_prefetch_bucket_size,
                                    zero.stage3_max_live_parameters, zero.stage3_max_reuse_distance)
    coordinator.adopt(list({u: None for found in units.values() for u in found}))
    if context.homes.partition_space is not None:  # the plan's partitions in swap files: read ahead a buffer each
        coordinator.read_ahead_units, _ = context.policy.plan.swap_budget(Copy.PARAM_PARTITION)
    hooks = ModuleHooks(model, units, coordinator, memory_efficient_linear=bool(zero.memory_efficient_linear))
    mark_persistent(p for p in model.parameters() if unit_of(p) is None)  # in their flat buckets by now
    return ShardedState(groups, buckets, GatheringPasses(model, coordinator, hooks, context.rank))


def _build_units(
    model: torch.nn.Module, group_of: dict[int, int], groups: int, context: BuildContext,
) -> tuple[dict[torch.nn.Module, list[ParamUnit]], list[list[ParamUnit]], list[list[MasterCopy | None]]]:
    threshold = context.config.zero_optimization.stage3_param_persistence_threshold
    comm, dtype, device, ledger = context.comm, context.dtype, context.device, context.ledger
    group_units: list[list[ParamUnit]] = [[] for _ in range(groups)]
    group_masters: list[list[MasterCopy | None]] = [[] for _ in range(groups)]
    unit_by_param: dict[int, ParamUnit] = {}
    seen: set[int] = set()
    partition = context.policy.plan.get(Copy.PARAM_PARTITION)
    kept = partition.in_memory_elements if partition is not None else None
    partitions = Partitions.at(context.homes, max_in_cpu=kept or 0)
    for name, module in model.named_modules():
        own = [p for p in module._parameters.values() if p is not None and id(p) not in seen]
        seen.update(map(id, own))
        if not own:
            continue
        sources = {id(u): u for p in own if (u := unit_of(p)) is not None}.values()  # zero_core.Init's units
        for source in sources:
            source.start_gather()
            source.wait()
        keys: dict[int | None, list[torch.nn.Parameter]] = {}
        for param in own:
            if param.numel() <= threshold:
                _make_whole(param, context, trainable=id(param) in group_of)
            else:
                keys.setdefault(group_of.get(id(param)), []).append(param)
        for key, params in keys.items():
            label = (name or "(root module)") + ("" if key is not None else " (frozen)")
            swap_name = f"group{key}.{label}" if key is not None else label
            master: MasterCopy | None = None
            if key is not None:  # its master is read before the unit empties the parameters
                layout = FlatLayout(params, comm.world_size)
                master = context.homes.masters.copy(swap_name, layout.shard_numel,
                                                    partial(fill_shard, layout=layout, rank=comm.rank))
            unit = ParamUnit(label, params, comm, dtype=dtype, ledger=ledger, device=device, partitions=partitions,
                             swap_name=swap_name, master=master)
            unit_by_param.update((id(p), unit) for p in params)
            if key is not None:
                group_units[key].append(unit)
                group_masters[key].append(master)
        for source in sources:
            source.drop()
    units: dict[torch.nn.Module, list[ParamUnit]] = {}
    for module in model.modules():
        found = {unit_by_param[id(p)]: None for p in module._parameters.values()
                 if p is not None and id(p) in unit_by_param}
        if found:
            units[module] = list(found)
    return units, group_units, group_masters


def _make_whole(param: torch.nn.Parameter, context: BuildContext, *, trainable: bool) -> None:
    """A persistent parameter: whole on every rank (trainable ones are flattened with their group later)."""
    if unit_of(param) is not None:
        param.data = param.data.clone()  # its Init unit's buffer is about to be dropped
        delattr(param, "_zero_unit")  # set by ParamUnit (not an attribute torch.nn.Parameter declares)
    if not trainable:
        place_frozen([param], context)


def _sharded_group(
    group_index: int, persistent: list[torch.nn.Parameter], units: list[ParamUnit],
    masters: list[MasterCopy | None], options: dict[str, Any], context: BuildContext,
) -> ShardedGroup:
    """One param group: persistent params in stage-2 buckets, then the units; one master over both."""
    comm, dtype, homes = context.comm, context.dtype, context.homes
    persistent = in_gradient_order(persistent, context)
    layouts = [FlatLayout(bucket, comm.world_size) for bucket in split_into_buckets(persistent, context.bucket_numel)]
    # The master reads the parameters' original values, before FlatParams casts them into its 16-bit buffer.
    copies = [homes.masters.copy(f"group{group_index}.persistent.bucket{index}", hi - lo,
                                 partial(copy_owned, layout=layout, lo=lo, hi=hi))
              for index, layout in enumerate(layouts) for lo, hi in [layout.shard_range(comm.rank)]]
    flat = Stage3Params(FlatParams(layouts, dtype, homes.on_device) if layouts else None, units, homes.on_device)
    ranges = [layout.shard_range(comm.rank) for layout in flat.layouts]
    master = homes.masters.assemble(copies + masters, ranges, flat)
    grads = GradBuckets(flat.layouts, comm.rank, context.policy, dtype, context.homes)
    return ShardedGroup(flat.layouts, flat, master, grads, dict(options))

