"""Every copy's home, as the placement plan (zero_plugins.placement) places it, at the offload devices opened.

| copy | on the device | offloaded |
|---|---|---|
| stage 3's 16-bit partitions | none (cast from the master) or `DeviceHome` | `HostHome` at `offload_param`'s device (pinned), past `max_in_cpu` in its swap space |
| gradient partitions | `DeviceHome`, fp32 at stage 3, compute dtype at stage 2 | `HostHome` at `offload_optimizer`'s device (pinned), fp32 |
| fp32 master and optimizer state | `ViewMasters` / `InMemoryMasters` | `InMemoryMasters` in host memory, or `SwappedMasters` in its swap space |

The builders, the gradient buckets, the master and the optimizer ask these homes; nothing
else decides where a copy lives. On the CPU accelerator the same homes run with plain copies.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from zero_plugins.placement import Copy, Location, PlacedCopy, PlacementPlan, StepGranularity

from ..memory import MemoryLedger
from ..offload import OffloadDevice, OffloadDevices, OpenedDevice, SwapSettings, SwapSpace
from ._dtypes import COMPUTE_DTYPES
from ._home import DeviceHome, Home, HostHome
from ._master_homes import InMemoryMasters, MasterHome, SwappedMasters, ViewMasters
from ._swap_pool import SwapPool


@dataclass
class Homes:
    device: torch.device
    on_device: DeviceHome  # what always lives on the device: gathered parameters, whole gradients, flat buckets
    parameters: Home  # stage 3's 16-bit partitions between uses (in memory; see `partition_swap`)
    gradients: Home  # gradients as the step reads them (stages 2-3: the reduced partitions themselves)
    gradient_dtype: torch.dtype  # of the gradient partitions: the plan's (fp32 at stage 3 and offloaded)
    masters: MasterHome  # the fp32 master and the optimizer state
    params_cast_from_master: bool  # stage 3 keeps no compute-dtype partition: gathers cast the master shard
    offload_devices: list[OffloadDevice] = field(default_factory=list)
    partition_space: SwapSpace | None = None  # where partitions past `max_in_cpu` go, with `offload_param: nvme`
    partition_swap: SwapSettings | None = None  # and the buffers they are read into
    _partition_pool: SwapPool | None = None

    def partition_pool(self) -> SwapPool:
        """The buffers partitions in swap space are read into, allocated when the first partition goes there."""
        if self.partition_space is None or self.partition_swap is None:
            raise RuntimeError("the parameters' offload device has no swap space")
        if self._partition_pool is None:
            self._partition_pool = SwapPool(self.partition_space, self.partition_swap)
        return self._partition_pool

    def synchronize(self) -> None:
        """Wait for every copy to and from the offload devices."""
        for device in self.offload_devices:
            device.synchronize()

    def close(self) -> None:
        """Release what the offload devices hold besides tensors (swap files, I/O workers)."""
        for device in self.offload_devices:
            device.close()


def build_homes(device: torch.device, ledger: MemoryLedger, dtype: torch.dtype, offload: OffloadDevices,
                plan: PlacementPlan, *, sub_group_numel: int) -> Homes:
    """Each copy's home, as the placement plan places it, at the offload devices `offload` opened for it (an
    optimizer in swap space steps through a pool of `offload.optimizer.swap` buffers)."""
    on_device = DeviceHome(device, ledger)
    steps_by_sub_group = plan.step_granularity is not StepGranularity.ALL_AT_ONCE
    gradients: Home = on_device
    device_sub_group = sub_group_numel if steps_by_sub_group else None
    masters: MasterHome = ViewMasters(on_device, device_sub_group)
    if not plan.master_is_params:
        masters = InMemoryMasters(on_device, device_sub_group)
    master = plan.get(Copy.MASTER)
    if master is not None and master.offload_device is not None:
        opened_optimizer = _opened(offload.optimizer, master)
        gradients = HostHome(opened_optimizer.device, transfers=True)
        host = HostHome(opened_optimizer.device, transfers=False)
        masters = InMemoryMasters(host, sub_group_numel)
        if master.location is Location.NVME:
            pool = SwapPool(_swap_space(opened_optimizer.device, master), opened_optimizer.swap)
            masters = SwappedMasters(host, pool, ledger)
    partitions: Home = on_device
    space = swap = None
    partition_copy = plan.get(Copy.PARAM_PARTITION)
    if partition_copy is not None and partition_copy.offload_device is not None:
        opened = _opened(offload.parameters, partition_copy)
        partitions = HostHome(opened.device, transfers=True)
        if partition_copy.location is Location.NVME:
            space, swap = _swap_space(opened.device, partition_copy), opened.swap
    devices = [opened.device for opened in (offload.optimizer, offload.parameters) if opened is not None]
    partition = plan.get(Copy.GRAD_PARTITION)
    gradient_dtype = COMPUTE_DTYPES[partition.dtype] if partition is not None else dtype
    return Homes(device, on_device, partitions, gradients, gradient_dtype, masters, plan.params_cast_from_master,
                 devices, space, swap if space is not None else None)


def _opened(opened: OpenedDevice | None, placed: PlacedCopy) -> OpenedDevice:
    """The device the plan places `placed` at, which engine/_offload.py opened from the same plan."""
    assert opened is not None, f"the plan places the {placed.copy} at {placed.offload_device!r}, which is not open"
    return opened


def _swap_space(device: OffloadDevice, placed: PlacedCopy) -> SwapSpace:
    assert device.swap_space is not None, f"the plan places the {placed.copy} in swap files at a device without them"
    return device.swap_space
