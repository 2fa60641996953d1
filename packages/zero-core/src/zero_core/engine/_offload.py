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
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..accelerator import Accelerator
from ..comm import Collectives
from ..memory import MemoryLedger
from ..offload import OffloadDevice, OffloadPlan, OffloadSettings, open_offload_device
from ..sharding import COMPUTE_DTYPES, ParamGroup, StagePolicy

if TYPE_CHECKING:
    from ..config import OffloadOptimizerConfig, OffloadParamConfig, ZeroConfig

# fp32 master, fp32 gradients, and Adam's two fp32 moments, per element of the partition.
_OPTIMIZER_HOST_BYTES = 4 + 4 + 8
# The fp32 gradients are the pinned part: reduced gradients are copied into them during backward.
_OPTIMIZER_PINNED_BYTES = 4


@dataclass(frozen=True)
class OffloadDevices:
    optimizer: OffloadDevice | None  # holds master, fp32 gradients and optimizer state
    parameters: OffloadDevice | None  # holds stage 3's 16-bit partitions


def open_offload_devices(
    model: torch.nn.Module, param_groups: list[ParamGroup], config: ZeroConfig, policy: StagePolicy,
    accelerator: Accelerator, ledger: MemoryLedger, comm: Collectives,
) -> OffloadDevices:
    zero = config.zero_optimization
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    optimizer = parameters = None
    plans: list[tuple[OffloadDevice, OffloadPlan]] = []

    def settings(block: OffloadOptimizerConfig | OffloadParamConfig, path: str) -> OffloadSettings:
        return OffloadSettings(block, path, config.aio, accelerator, ledger, comm.rank, local_world)

    if policy.optimizer_state.offloaded and zero.offload_optimizer is not None:
        block: OffloadOptimizerConfig | OffloadParamConfig = zero.offload_optimizer
        optimizer = open_offload_device(block.device, settings(block, "zero_optimization.offload_optimizer"))
        trainable = sum(p.numel() for group in param_groups for p in group.params)
        partition = math.ceil(trainable / comm.world_size)
        pinned = _OPTIMIZER_PINNED_BYTES * partition if block.pin_memory else 0
        plans.append((optimizer, OffloadPlan(_OPTIMIZER_HOST_BYTES * partition, pinned)))
    if policy.parameters.offloaded and zero.offload_param is not None:
        block = zero.offload_param
        parameters = open_offload_device(block.device, settings(block, "zero_optimization.offload_param"))
        threshold = zero.stage3_param_persistence_threshold
        partitioned = sum(p.numel() for p in model.parameters() if p.numel() > threshold)
        nbytes = math.ceil(partitioned / comm.world_size) * COMPUTE_DTYPES[config.compute_dtype].itemsize
        plans.append((parameters, OffloadPlan(nbytes, nbytes if block.pin_memory else 0)))
    _check_capacity(plans)
    return OffloadDevices(optimizer, parameters)


def _check_capacity(plans: list[tuple[OffloadDevice, OffloadPlan]]) -> None:
    """Devices of one kind share one resource (host memory, a disk), so each kind checks the sum of its plans."""
    by_kind: dict[type[OffloadDevice], tuple[OffloadDevice, OffloadPlan]] = {}
    for device, plan in plans:
        kind = type(device)
        if kind in by_kind:
            first, total = by_kind[kind]
            plan = OffloadPlan(total.host_bytes + plan.host_bytes, total.pinned_bytes + plan.pinned_bytes)
            device = first
        by_kind[kind] = (device, plan)
    for device, plan in by_kind.values():
        device.check_capacity(plan)
