"""The offload devices a ds_config asks for, opened and checked before anything is allocated.

`offload_optimizer` places the fp32 master, the fp32 gradients and the optimizer state of
this rank's partition at its device; `offload_param` (stage 3) places the 16-bit
partitions at its device. Each device is found by name in zero-core's registry
(zero-offload provides `cpu` and `nvme`), and asked to size this rank's copies
(`OffloadDevice.plan`, with the optimizer's own state size), so that a shortfall of host
memory, locked memory or disk is one error here. With swap space, the optimizer's buffers
each hold one swap slice (`zero_plugins.swap_slice_numel`): a budget's share of the state,
not a whole sub-group, where the optimizer steps element by element.
"""
from __future__ import annotations

import math
import secrets
from typing import TYPE_CHECKING

import torch
from zero_plugins import env_int, swap_slice_numel
from zero_plugins.placement import Copy, Location

from ..accelerator import Accelerator
from ..comm import Collectives
from ..memory import MemoryLedger, Placement, read_int
from ..offload import (
    OffloadDevice,
    OffloadDevices,
    OffloadPlan,
    OffloadSettings,
    OpenedDevice,
    OptimizerCopies,
    ParameterCopies,
    SwapSettings,
    offload_device_registry,
    open_offload_device,
    steps_elementwise,
)
from ..sharding import COMPUTE_DTYPES, OptimizerFactory, ParamGroup, StagePolicy

if TYPE_CHECKING:
    from zero_plugins.ds_config import OffloadOptimizerConfig, OffloadParamConfig, ZeroConfig


def open_offload_devices(
    model: torch.nn.Module, param_groups: list[ParamGroup], config: ZeroConfig, policy: StagePolicy,
    accelerator: Accelerator, ledger: MemoryLedger, comm: Collectives,
    client: torch.optim.Optimizer | OptimizerFactory | None = None,
) -> OffloadDevices:
    """`client`: the optimizer (or factory) passed to initialize, which steps instead of the config's. Which
    copies go to which device is the placement plan's (`policy.plan`); the blocks give each device its settings."""
    zero = config.zero_optimization
    plan = policy.plan
    local_world = env_int("LOCAL_WORLD_SIZE", 1, minimum=1)
    blocks = [b for b in (zero.offload_optimizer, zero.offload_param) if b is not None and b.device != "none"]
    keeps_files = any(b.device in plan.inputs.swap_devices for b in blocks)  # the plan's NVMe locations
    run_id = _shared_run_id(comm, accelerator) if keeps_files else ""

    def open_for(block: OffloadOptimizerConfig | OffloadParamConfig, path: str) -> OffloadDevice:
        return open_offload_device(block.device, OffloadSettings(block, path, config.aio, accelerator, ledger,
                                                                 comm.rank, local_world, run_id))

    optimizer = parameters = None
    plans: list[tuple[OffloadDevice, OffloadPlan]] = []
    if plan.offloaded(Copy.MASTER) is not None and zero.offload_optimizer is not None:
        block = zero.offload_optimizer
        device = open_for(block, "zero_optimization.offload_optimizer")
        trainable = sum(p.numel() for group in param_groups for p in group.params)
        partition = math.ceil(trainable / comm.world_size)
        kind = config.optimizer.type if config.optimizer is not None else None
        state = plan.inputs.optimizer_state_tensors
        # One buffer holds one swap slice: sized from the pool's budget, not from the sub-group alone.
        slice_numel = swap_slice_numel(partition=partition, sub_group_size=zero.sub_group_size, state_tensors=state,
                                       buffer_count=block.buffer_count, block_size=config.aio.block_size,
                                       elementwise=_steps_elementwise(kind, client, device))
        swap = SwapSettings(buffer_count=block.buffer_count, buffer_numel=slice_numel,
                            pipeline_read=bool(block.pipeline_read), pipeline_write=bool(block.pipeline_write))
        plans.append((device, device.plan(OptimizerCopies.from_plan(plan, elements=partition, swap=swap))))
        optimizer = OpenedDevice(device, swap)
    partition_copy = plan.get(Copy.PARAM_PARTITION)
    if partition_copy is not None and partition_copy.offload_device is not None and zero.offload_param is not None:
        param_block = zero.offload_param
        device = open_for(param_block, "zero_optimization.offload_param")
        threshold = zero.stage3_param_persistence_threshold
        partitioned = sum(p.numel() for p in model.parameters() if p.numel() > threshold)
        dtype = COMPUTE_DTYPES[partition_copy.dtype]
        elements = math.ceil(partitioned / comm.world_size)
        swap = SwapSettings(buffer_count=param_block.buffer_count,
                            buffer_numel=min(param_block.buffer_size, max(elements, 1)),
                            block_path="zero_optimization.offload_param", dtype=dtype)
        copies = ParameterCopies(elements=elements, dtype=dtype, max_in_cpu=param_block.max_in_cpu, swap=swap,
                                 in_swap=partition_copy.location is Location.NVME)
        plans.append((device, device.plan(copies)))
        parameters = OpenedDevice(device, swap)
    _check_capacity(plans)
    return OffloadDevices(optimizer, parameters)


def _steps_elementwise(kind: str | None, client: torch.optim.Optimizer | OptimizerFactory | None,
                       device: OffloadDevice) -> bool:
    """Whether the optimizer that will step is known to update each element from its own grad and state alone."""
    if client is None:
        return kind is not None and steps_elementwise(kind)
    if not isinstance(client, torch.optim.Optimizer):
        return False  # a factory's optimizer exists only after the pool does
    known: set[type[torch.optim.Optimizer]] = {torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD,
                                               torch.optim.Adagrad}
    known |= {cls for name in ("adam", "adagrad", "lion") if (cls := device.optimizer_class(name)) is not None}
    return type(client) in known


def swap_device_names(*, config_devices: list[str]) -> frozenset[str]:
    """Which of the offload devices a config names keep copies in swap files (the plan's NVMe locations); the
    registry is not loaded when the config names none. An unknown name is not one: opening it fails clearly."""
    names = {name for name in config_devices if name != "none"}
    if not names:
        return frozenset()
    found = offload_device_registry.registrations()
    return frozenset(name for name in names if name in found and found[name].cls.placement is Placement.NVME)


def _shared_run_id(comm: Collectives, accelerator: Accelerator) -> str:
    """Rank 0's random id, the same on every rank: it names this run's swap directory, so two runs never share one."""
    device = accelerator.device(accelerator.current_device())
    value = torch.tensor([secrets.randbits(62) if comm.rank == 0 else 0], dtype=torch.int64, device=device)
    comm.broadcast(value)
    return f"{read_int(value, if_fake=0):016x}"


def _check_capacity(plans: list[tuple[OffloadDevice, OffloadPlan]]) -> None:
    """Devices of one kind share one resource (host memory, a disk), so each kind checks the sum of its plans."""
    by_kind: dict[type[OffloadDevice], tuple[OffloadDevice, OffloadPlan]] = {}
    for device, plan in plans:
        kind = type(device)
        if kind in by_kind:
            first, total = by_kind[kind]
            plan = OffloadPlan(total.host_bytes + plan.host_bytes, total.pinned_bytes + plan.pinned_bytes,
                               total.disk_bytes + plan.disk_bytes)
            device = first
        by_kind[kind] = (device, plan)
    for device, plan in by_kind.values():
        device.check_capacity(plan)
