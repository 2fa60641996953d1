"""Accelerators: the devices the engine runs on, found through the `zero_register_accelerators` hook."""
from ._copies import COMPLETED, CopyStream, Transfer
from ._host_memory import available_bytes as host_memory_available
from ._host_memory import total_bytes as host_memory_bytes
from ._memory_usage import pinned_stats, see_memory_usage
from ._select import (
    ENV_VAR,
    AcceleratorUnavailable,
    Selection,
    accelerator_registry,
    get_accelerator,
    get_selection,
    reset_accelerator,
    select_accelerator,
    set_accelerator,
    using_accelerator,
)
from ._single_device import SingleDeviceAccelerator
from .abstract import Accelerator

__all__ = [
    "COMPLETED",
    "ENV_VAR",
    "Accelerator",
    "AcceleratorUnavailable",
    "CopyStream",
    "Selection",
    "SingleDeviceAccelerator",
    "accelerator_registry",
    "get_accelerator",
    "get_selection",
    "host_memory_available",
    "host_memory_bytes",
    "reset_accelerator",
    "select_accelerator",
    "pinned_stats",
    "see_memory_usage",
    "set_accelerator",
    "Transfer",
    "using_accelerator",
]
