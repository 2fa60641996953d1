"""Assemble an engine (stages 0-2 here, stage 3 in zero_core.stage3) from a model, a loaded config and the client's objects."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ..accelerator import get_accelerator
from ..config import ConfigError
from ..memory.ledger import MemoryLedger
from ._build_optimizer import OptimizerFactory, build_optimizer
from ._collectives import Collectives
from ._data import build_dataloader
from ._engine import EngineParts, ZeroEngine
from ._groups import Placement, build_group, reduce_buckets
from ._loss_scaler import build_loss_scaler
from ._optimizer import ZeroOptimizer
from ._param_groups import frozen_params, resolve_param_groups
from ._reducer import GradReducer
from ._schedulers import build_scheduler

if TYPE_CHECKING:
    from ..config import ZeroConfig

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def build_engine(
    model: torch.nn.Module,
    config: ZeroConfig,
    optimizer: torch.optim.Optimizer | OptimizerFactory | None = None,
    model_parameters: Iterable[Any] | None = None,
    lr_scheduler: Any = None,
    training_data: torch.utils.data.Dataset | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    group: dist.ProcessGroup | None = None,
) -> ZeroEngine:
    stage = config.zero_optimization.stage
    _check_supported(config)
    accelerator = get_accelerator()
    device = accelerator.device(accelerator.current_device())
    dtype = DTYPES[config.compute_dtype]
    if dtype not in accelerator.supported_dtypes():
        raise ConfigError(f"{config.compute_dtype}.enabled",
                          f"the {accelerator.name} accelerator does not support {config.compute_dtype}")
    ledger = MemoryLedger()
    comm = Collectives(ledger, group)
    client = optimizer if isinstance(optimizer, torch.optim.Optimizer) else None
    param_groups = resolve_param_groups(model, model_parameters, client)
    if stage == 3:
        from ..stage3._build import build_stage3_engine  # stage 3 builds on this package: imported late

        return build_stage3_engine(model, config, param_groups, optimizer, lr_scheduler, training_data, collate_fn,
                                   ledger, comm, device, dtype)
    _broadcast_module(model, comm)
    _place_frozen_and_buffers(model, dtype, device, ledger)
    order = {id(p): index for index, p in enumerate(model.parameters())}
    where = Placement(comm.rank, comm.world_size, stage, dtype, device, config.zero_optimization.reduce_bucket_size)
    groups = [build_group(g, order, where, ledger) for g in param_groups]
    inner = build_optimizer(config.optimizer, optimizer, [{"params": g.master.tensors, **g.options} for g in groups])
    zero_optimizer = ZeroOptimizer(
        inner, groups, comm, build_loss_scaler(config), config.gradient_clipping, stage,
        fp16=dtype == torch.float16, ledger=ledger,
    )
    scheduler = _scheduler(config, lr_scheduler, inner)
    reducer = GradReducer(reduce_buckets(groups, order), comm, stage, bool(config.zero_optimization.overlap_comm),
                          ledger)
    loader = None
    if training_data is not None:
        loader = build_dataloader(training_data, int(config.train_micro_batch_size_per_gpu), comm.rank,
                                  comm.world_size, collate_fn)
    return ZeroEngine(EngineParts(model, config, zero_optimizer, scheduler, reducer, ledger, device, dtype, loader))


def _check_supported(config: ZeroConfig) -> None:
    zero = config.zero_optimization
    offload = zero.offload_optimizer
    if offload is not None and offload.device != "none":
        raise ConfigError("zero_optimization.offload_optimizer.device",
                          f"{offload.device!r} offload is not available in this version of zero-core; set it to \"none\"")


def _broadcast_module(model: torch.nn.Module, comm: Collectives) -> None:
    """Start every rank from rank 0's weights and buffers, as DeepSpeed does."""
    if comm.world_size == 1:
        return
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            comm.broadcast(tensor.data)


def _place_frozen_and_buffers(model: torch.nn.Module, dtype: torch.dtype, device: torch.device,
                              ledger: MemoryLedger) -> None:
    """Frozen params and floating buffers take the compute dtype (DeepSpeed casts the whole module)."""
    for param in frozen_params(model):
        param.data = param.data.to(device=device, dtype=dtype if param.is_floating_point() else param.dtype)
        ledger.register(param.data, "param.persistent")
    for module in model.modules():
        for name, buffer in module._buffers.items():
            if buffer is not None:
                cast = dtype if buffer.is_floating_point() else buffer.dtype
                module._buffers[name] = ledger.register(buffer.to(device=device, dtype=cast), "module.buffers")


def _scheduler(config: ZeroConfig, client: Any, optimizer: torch.optim.Optimizer) -> Any:
    """The client's scheduler (or callable) wins over the config's, as in DeepSpeed."""
    if client is not None:
        return client(optimizer) if callable(client) and not hasattr(client, "step") else client
    if config.scheduler is not None:
        return build_scheduler(config.scheduler, optimizer)
    return None
