"""Offload devices: the interface, hook and registry through which the engine places copies off the accelerator.

zero-offload registers the `cpu` and `nvme` devices; docs/offload.md describes them.
"""
from zero_plugins.placement import optimizer_state_tensors

from ._device import OffloadDevice, OffloadDevices, OffloadSettings, OpenedDevice
from ._select import offload_device_registry, open_offload_device
from ._sizing import OffloadPlan, OptimizerCopies, ParameterCopies, steps_elementwise
from ._swap import SwapSettings, SwapSlot, SwapSpace, SwapTransfer

__all__ = ["OffloadDevice", "OffloadDevices", "OffloadPlan", "OffloadSettings", "OpenedDevice", "OptimizerCopies",
           "ParameterCopies", "SwapSettings", "SwapSlot", "SwapSpace", "SwapTransfer", "offload_device_registry",
           "open_offload_device", "optimizer_state_tensors", "steps_elementwise"]
