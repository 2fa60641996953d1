"""Offload devices: the interface, hook and registry through which the engine places copies off the accelerator.

zero-offload registers the `cpu` and `nvme` devices; docs/offload.md describes them.
"""
from ._device import OffloadDevice, OffloadPlan, OffloadSettings
from ._select import offload_device_registry, open_offload_device
from ._swap import SwapSlot, SwapSpace, SwapTransfer

__all__ = ["OffloadDevice", "OffloadPlan", "OffloadSettings", "SwapSlot", "SwapSpace", "SwapTransfer",
           "offload_device_registry", "open_offload_device"]
