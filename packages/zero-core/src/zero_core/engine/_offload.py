"""The offload devices a ds_config asks for, opened and checked before anything is allocated.

`offload_optimizer` places the fp32 master, the fp32 gradients and the optimizer state of
this rank's partition at its device; `offload_param` (stage 3) places the 16-bit
partitions at its device. Each device is found by name in zero-core's registry
(zero-offload provides `cpu` and `nvme`), and told this rank's plan, the bytes it will hold
and pin, so that a shortfall of host memory, locked memory or disk is one error here.
"""
from __future__ import annotations

import math
import os
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..accelerator import Accelerator
from ..comm import Collectives
from ..memory import MemoryLedger, Placement
from ..offload import OffloadDevice, OffloadPlan, OffloadSettings, offload_device_registry, open_offload_device
from ..sharding import COMPUTE_DTYPES, ParamGroup, StagePolicy, SwapSettings

if TYPE_CHECKING:
    from zero_plugins.ds_config import OffloadOptimizerConfig, OffloadParamConfig, ZeroConfig

# fp32 master, fp32 gradients, and Adam's two fp32 moments, per element of the partition.
_OPTIMIZER_HOST_BYTES = 4 + 4 + 8
# The fp32 gradients are the pinned part: reduced gradients are copied into them during backward.
_OPTIMIZER_PINNED_BYTES = 4
# In swap space: the fp32 master and Adam's two moments; the gradients stay in host memory.
_OPTIMIZER_SWAPPED_BYTES = 4 + 8
_SWAP_ALIGNMENT = 4096  # swap slots and buffers are laid out in whole 4 KiB blocks (O_DIRECT)


@dataclass(frozen=True)
class OffloadDevices:
    optimizer: OffloadDevice | None  # holds master, fp32 gradients and optimizer state
    parameters: OffloadDevice | None  # holds stage 3's 16-bit partitions
    swap: SwapSettings | None  # how the step swaps, when the optimizer's device keeps its state in swap space
    param_swap: SwapSettings | None  # stage 3's partition buffers, when the parameters' device has swap space


def open_offload_devices(
    model: torch.nn.Module, param_groups: list[ParamGroup], config: ZeroConfig, policy: StagePolicy,
    accelerator: Accelerator, ledger: MemoryLedger, comm: Collectives,
) -> OffloadDevices:
    zero = config.zero_optimization
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    optimizer = parameters = None
    swap = param_swap = None
    plans: list[tuple[OffloadDevice, OffloadPlan]] = []
    blocks = [b for b in (zero.offload_optimizer, zero.offload_param) if b is not None and b.device != "none"]
    run_id = _shared_run_id(comm, accelerator) if any(_keeps_files(b.device) for b in blocks) else ""

    def settings(block: OffloadOptimizerConfig | OffloadParamConfig, path: str) -> OffloadSettings:
        return OffloadSettings(block, path, config.aio, accelerator, ledger, comm.rank, local_world, run_id)

    if policy.optimizer_state.offloaded and zero.offload_optimizer is not None:
        block = zero.offload_optimizer
        optimizer = open_offload_device(block.device, settings(block, "zero_optimization.offload_optimizer"))
        trainable = sum(p.numel() for group in param_groups for p in group.params)
        partition = math.ceil(trainable / comm.world_size)
        grads = _OPTIMIZER_PINNED_BYTES * partition
        if optimizer.swap_space is None:
            plan = OffloadPlan(_OPTIMIZER_HOST_BYTES * partition, grads if block.pin_memory else 0)
        else:
            swap = SwapSettings(block.buffer_count, min(zero.sub_group_size, max(partition, 1)),
                                bool(block.pipeline_read), bool(block.pipeline_write))
            pool = swap.buffer_count * _padded(swap.buffer_numel * 4)
            plan = OffloadPlan(grads + pool, grads + pool if block.pin_memory else 0,
                               disk_bytes=_OPTIMIZER_SWAPPED_BYTES * partition)
        plans.append((optimizer, plan))
    if policy.parameters.offloaded and zero.offload_param is not None:
        param_block = zero.offload_param
        parameters = open_offload_device(param_block.device, settings(param_block, "zero_optimization.offload_param"))
        threshold = zero.stage3_param_persistence_threshold
        partitioned = sum(p.numel() for p in model.parameters() if p.numel() > threshold)
        dtype = COMPUTE_DTYPES[config.compute_dtype]
        elements = math.ceil(partitioned / comm.world_size)
        if parameters.swap_space is None:
            nbytes = elements * dtype.itemsize
            plans.append((parameters, OffloadPlan(nbytes, nbytes if param_block.pin_memory else 0)))
        else:
            param_swap = SwapSettings(param_block.buffer_count, min(param_block.buffer_size, max(elements, 1)),
                                      False, False, "zero_optimization.offload_param", dtype)
            # The first max_in_cpu elements stay in host memory; the rest go to swap space.
            in_memory = min(param_block.max_in_cpu, elements) * dtype.itemsize
            pool = param_swap.buffer_count * _padded(param_swap.buffer_numel * dtype.itemsize)
            disk = (elements * dtype.itemsize) - in_memory
            host = in_memory + (pool if disk else 0)
            plans.append((parameters, OffloadPlan(host, host if param_block.pin_memory else 0, disk_bytes=disk)))
    _check_capacity(plans)
    return OffloadDevices(optimizer, parameters, swap, param_swap)


def _keeps_files(name: str) -> bool:
    found = offload_device_registry.registrations().get(name)
    return found is not None and found.cls.placement is Placement.NVME


def _shared_run_id(comm: Collectives, accelerator: Accelerator) -> str:
    """Rank 0's random id, the same on every rank: it names this run's swap directory, so two runs never share one."""
    device = accelerator.device(accelerator.current_device())
    value = torch.tensor([secrets.randbits(62) if comm.rank == 0 else 0], dtype=torch.int64, device=device)
    comm.broadcast(value)
    return f"{int(value.item()):016x}"


def _padded(nbytes: int) -> int:
    return -(-nbytes // _SWAP_ALIGNMENT) * _SWAP_ALIGNMENT


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
