"""Assemble a stage-3 engine: persistent and partitioned parameters, units, optimizer, reducer, hooks.

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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ..config import ConfigError
from ..engine._build import _scheduler
from ..engine._build_optimizer import OptimizerFactory, build_optimizer
from ..engine._collectives import Collectives
from ..engine._data import build_dataloader
from ..engine._engine import EngineParts
from ..engine._flat_params import FlatParams
from ..engine._grads import GradBuckets
from ..engine._groups import ShardedGroup, reduce_buckets
from ..engine._layout import FlatLayout, split_into_buckets
from ..engine._loss_scaler import build_loss_scaler
from ..engine._master import MasterParams
from ..engine._packed_bucket import pack_buckets
from ..engine._param_groups import ParamGroup
from ..engine._reducer import GradReducer
from ..memory.ledger import MemoryLedger
from ._coordinator import GatherCoordinator
from ._engine import Stage3Engine
from ._held import HeldMemoryDetector
from ._hooks import ModuleHooks
from ._optimizer import Stage3Optimizer
from ._params import Stage3Params
from ._unit import ParamUnit, shard_of, unit_of

if TYPE_CHECKING:
    from ..config import ZeroConfig


def build_stage3_engine(
    model: torch.nn.Module,
    config: ZeroConfig,
    param_groups: list[ParamGroup],
    optimizer: torch.optim.Optimizer | OptimizerFactory | None,
    lr_scheduler: Any,
    training_data: torch.utils.data.Dataset | None,
    collate_fn: Callable[[list[Any]], Any] | None,
    ledger: MemoryLedger,
    comm: Collectives,
    device: torch.device,
    dtype: torch.dtype,
) -> Stage3Engine:
    zero = config.zero_optimization
    if zero.offload_param is not None and zero.offload_param.device != "none":
        raise ConfigError("zero_optimization.offload_param.device",
                          f"{zero.offload_param.device!r} offload is not available in this version of zero-core; "
                          "set it to \"none\"")
    _broadcast_whole(model, comm)
    _place_buffers(model, dtype, device, ledger)
    group_of = {id(p): index for index, group in enumerate(param_groups) for p in group.params}
    threshold = zero.stage3_param_persistence_threshold
    units, group_units, group_masters = _build_units(model, group_of, threshold, comm, dtype, device, ledger)
    _check_live_cap(zero.stage3_max_live_parameters, [u for found in units.values() for u in found])
    order = {id(p): index for index, p in enumerate(model.parameters())}
    groups = []
    for index, group in enumerate(param_groups):
        persistent = [p for p in group.params if unit_of(p) is None]
        groups.append(_sharded_group(persistent, group_units[index], group_masters[index], group.options, order,
                                     comm, dtype, device, ledger, zero.reduce_bucket_size))
    inner = build_optimizer(config.optimizer, optimizer, [{"params": g.master.tensors, **g.options} for g in groups])
    zero_optimizer = Stage3Optimizer(inner, groups, comm, build_loss_scaler(config), config.gradient_clipping, 3,
                                     fp16=dtype == torch.float16, ledger=ledger)
    # one bucket per unit, packed up to reduce_bucket_size elements so that a block's small units share a collective
    buckets = pack_buckets(reduce_buckets(groups, order), zero.reduce_bucket_size, comm.world_size)
    reducer = GradReducer(buckets, comm, 2, bool(zero.overlap_comm), ledger)
    coordinator = GatherCoordinator(HeldMemoryDetector(ledger), zero.stage3_prefetch_bucket_size,
                                    zero.stage3_max_live_parameters, zero.stage3_max_reuse_distance)
    coordinator.adopt(list({u: None for found in units.values() for u in found}))
    hooks = ModuleHooks(model, units, coordinator, bool(zero.memory_efficient_linear))
    loader = None
    if training_data is not None:
        loader = build_dataloader(training_data, int(config.train_micro_batch_size_per_gpu), comm.rank,
                                  comm.world_size, collate_fn)
    parts = EngineParts(model, config, zero_optimizer, _scheduler(config, lr_scheduler, inner), reducer, ledger,
                        device, dtype, loader)
    return Stage3Engine(parts, coordinator=coordinator, hooks=hooks, comm=comm)


def _build_units(
    model: torch.nn.Module, group_of: dict[int, int], threshold: int, comm: Collectives, dtype: torch.dtype,
    device: torch.device, ledger: MemoryLedger,
) -> tuple[dict[torch.nn.Module, list[ParamUnit]], list[list[ParamUnit]], list[list[torch.Tensor]]]:
    groups = max(group_of.values(), default=-1) + 1
    group_units: list[list[ParamUnit]] = [[] for _ in range(groups)]
    group_masters: list[list[torch.Tensor]] = [[] for _ in range(groups)]
    unit_by_param: dict[int, ParamUnit] = {}
    seen: set[int] = set()
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
                _make_whole(param, dtype, device, ledger, trainable=id(param) in group_of)
            else:
                keys.setdefault(group_of.get(id(param)), []).append(param)
        for key, params in keys.items():
            master = None
            if key is not None and dtype != torch.float32:
                layout = FlatLayout(params, comm.world_size)
                master = ledger.new("optim.master", lambda: shard_of(layout, comm.rank, torch.float32, device))
            label = f"{name or type(model).__name__}" + ("" if key is not None else " (frozen)")
            unit = ParamUnit(label, params, comm, dtype, ledger, device)
            unit.master = master
            unit_by_param.update((id(p), unit) for p in params)
            if key is not None:
                group_units[key].append(unit)
                group_masters[key].append(master if master is not None else unit.shard)
        for source in sources:
            source.drop()
    units: dict[torch.nn.Module, list[ParamUnit]] = {}
    for module in model.modules():
        found = {unit_by_param[id(p)]: None for p in module._parameters.values()
                 if p is not None and id(p) in unit_by_param}
        if found:
            units[module] = list(found)
    return units, group_units, group_masters


def _make_whole(param: torch.nn.Parameter, dtype: torch.dtype, device: torch.device, ledger: MemoryLedger,
                trainable: bool) -> None:
    """A persistent parameter: whole on every rank (trainable ones are flattened with their group later)."""
    if unit_of(param) is not None:
        param.data = param.data.clone()  # its Init unit's buffer is about to be dropped
        del param._zero_unit
    if not trainable:
        param.data = param.data.to(device=device, dtype=dtype if param.is_floating_point() else param.dtype)
        ledger.register(param.data, "param.persistent")


def _sharded_group(
    persistent: list[torch.nn.Parameter], units: list[ParamUnit], masters: list[torch.Tensor],
    options: dict[str, Any], order: dict[int, int], comm: Collectives, dtype: torch.dtype, device: torch.device,
    ledger: MemoryLedger, bucket_numel: int,
) -> ShardedGroup:
    """One param group: persistent params in stage-2 buckets, then the units; one master over both."""
    persistent = sorted(persistent, key=lambda p: -order[id(p)])  # gradient order, as at stage 2
    layouts = [FlatLayout(bucket, comm.world_size) for bucket in split_into_buckets(persistent, bucket_numel)]
    persistent_master = None
    if dtype != torch.float32:
        persistent_master = MasterParams.copy_of(layouts, comm.rank, True, device, ledger)
    flat = Stage3Params(FlatParams(layouts, dtype, device, ledger) if layouts else None, units)
    if persistent_master is None:
        master = MasterParams.view_of(flat, comm.rank, True)
    else:
        ranges = [unit.layout.shard_range(comm.rank) for unit in units]
        master = MasterParams(persistent_master.tensors + masters, persistent_master.ranges + ranges, is_view=False)
    grads = GradBuckets(flat.layouts, comm.rank, 2, dtype, device, ledger)
    return ShardedGroup(flat.layouts, flat, master, grads, dict(options))


def _check_live_cap(max_live: int, units: list[ParamUnit]) -> None:
    if not units:
        return
    largest = max(units, key=lambda u: u.numel)
    if largest.numel > max_live:
        raise ConfigError("zero_optimization.stage3_max_live_parameters",
                          f"is {max_live}, below the {largest.numel} elements of {largest.name}, which must be "
                          f"gathered whole; raise it to at least {largest.numel}")


def _broadcast_whole(model: torch.nn.Module, comm: Collectives) -> None:
    """Start every rank from rank 0's weights and buffers (Init already broadcast what it partitioned)."""
    if comm.world_size == 1:
        return
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if unit_of(tensor) is None:
                comm.broadcast(tensor.data)


def _place_buffers(model: torch.nn.Module, dtype: torch.dtype, device: torch.device, ledger: MemoryLedger) -> None:
    """Floating buffers take the compute dtype, as at stages 0-2."""
    for module in model.modules():
        for name, buffer in module._buffers.items():
            if buffer is not None:
                cast = dtype if buffer.is_floating_point() else buffer.dtype
                module._buffers[name] = ledger.register(buffer.to(device=device, dtype=cast), "module.buffers")
