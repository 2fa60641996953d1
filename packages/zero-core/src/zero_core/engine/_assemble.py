"""The one assembly path: a model, a loaded config and the client's objects become an engine.

The stage's policy picks the builder of the sharded state (stages 0-2: whole parameters in
flat buckets; stage 3: partitioned units); everything else (the process group's
collectives, the ledger, the param groups, the optimizer, the reducer, the scheduler and
the data loader) is assembled here, the same way for every stage.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

import torch

from ..accelerator import get_accelerator
from ..comm import Collectives
from zero_plugins.ds_config import ConfigError
from zero_plugins.placement import StepGranularity, plan_for_config
from ..memory import MemoryLedger
from ..sharding import (
    COMPUTE_DTYPES,
    BuildContext,
    GradReducer,
    OptimizerFactory,
    ParamGroup,
    ShardedState,
    StagePolicy,
    ZeroOptimizer,
    build_flat_state,
    build_homes,
    build_optimizer,
    name_parameters,
    policy_for,
    resolve_param_groups,
)
from ..stage3 import build_stage3_state
from ..training import build_dataloader, build_loss_scaler, resolve_scheduler
from ._engine import EngineParts, ZeroEngine
from ._offload import open_offload_devices, swap_device_names
from ._preflight import WRAPPED_ATTRIBUTE, check_model, check_no_float64, check_ranks_agree

if TYPE_CHECKING:
    from zero_plugins.ds_config import ZeroConfig

StateBuilder = Callable[[torch.nn.Module, list[ParamGroup], BuildContext], ShardedState]


def assemble_engine(
    model: torch.nn.Module,
    config: ZeroConfig,
    optimizer: torch.optim.Optimizer | OptimizerFactory | None = None,
    model_parameters: Iterable[Any] | None = None,
    lr_scheduler: Any = None,
    training_data: torch.utils.data.Dataset[Any] | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
) -> ZeroEngine:
    accelerator = get_accelerator()
    device = accelerator.device(accelerator.current_device())
    dtype = COMPUTE_DTYPES[config.compute_dtype]
    if dtype not in accelerator.supported_dtypes():
        raise ConfigError(f"{config.compute_dtype}.enabled",
                          f"the {accelerator.name} accelerator does not support {config.compute_dtype}")
    ledger = MemoryLedger()
    ledger.set_ruler(accelerator.allocator_ruler())  # the allocator beside the ledger, where one counts
    comm = Collectives(ledger)
    policy = policy_for(plan_for_config(config, world_size=comm.world_size, accelerator=device.type,
                                        swap_devices=swap_device_names(config_devices=_offload_names(config))))
    name_parameters(model)
    client = optimizer if isinstance(optimizer, torch.optim.Optimizer) else None
    # DeepSpeed's inference engine (TRL's reference model): no optimizer given or configured, so forward only, and
    # every parameter is held as a frozen one (compute dtype, no master copy, no gradient), as DeepSpeed holds them
    forward_only = optimizer is None and config.optimizer is None
    param_groups = [ParamGroup([])] if forward_only else resolve_param_groups(model, model_parameters, client)
    check_model(model, param_groups, policy.stage, trains=not forward_only)
    check_ranks_agree(model, config)  # before the first collective that a difference would hang
    check_no_float64(model)
    offload = open_offload_devices(model, param_groups, config, policy, accelerator, ledger, comm, optimizer)
    homes = build_homes(device, ledger, dtype, offload, policy.plan,
                        sub_group_numel=config.zero_optimization.sub_group_size)
    order = {id(p): index for index, p in enumerate(model.parameters())}
    context = BuildContext(config, policy, comm, ledger, device, dtype, order, homes)
    state = _state_builder(policy)(model, param_groups, context)
    inner = build_optimizer(config.optimizer, optimizer,
                            [{"params": g.master.optimizer_params, **g.options} for g in state.groups],
                            offload.optimizer.device.optimizer_class if offload.optimizer is not None else None)
    zero_optimizer = ZeroOptimizer(inner, state.groups, comm, build_loss_scaler(config), config.gradient_clipping,
                                   policy, ledger=ledger, homes=homes,
                                   step_in_backward=policy.plan.step_granularity is StepGranularity.IN_BACKWARD)
    reducer = GradReducer(state.buckets, comm, policy.grad_reduction, ledger,
                          overlap=bool(config.zero_optimization.overlap_comm))
    loader = None
    if training_data is not None:
        # None only in a config load_config(..., world_size=N) has not resolved; int() still refuses that
        loader = build_dataloader(training_data, int(cast(int, config.train_micro_batch_size_per_gpu)), comm.rank,
                                  comm.world_size, collate_fn)
    scheduler = resolve_scheduler(config, lr_scheduler, inner)
    engine = ZeroEngine(EngineParts(model, config, policy, zero_optimizer, scheduler, reducer, state.passes, comm,
                                    ledger, device, dtype, homes, loader, forward_only))
    setattr(model, WRAPPED_ATTRIBUTE, True)  # until engine.destroy(): a second initialize on it is refused
    return engine


def _offload_names(config: ZeroConfig) -> list[str]:
    zero = config.zero_optimization
    return [block.device for block in (zero.offload_optimizer, zero.offload_param) if block is not None]


def _state_builder(policy: StagePolicy) -> StateBuilder:
    return build_stage3_state if policy.shards_parameters else build_flat_state
