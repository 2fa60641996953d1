"""zero-offload's hook implementations, loaded through the `zero` entry point.

Imports no torch at module level: the device classes are imported inside the hooks.
"""
from __future__ import annotations

from collections.abc import Callable

from zero_plugins import hookimpl


@hookimpl
def zero_register_offload_devices(register: Callable[[str, type], None]) -> None:
    from ._cpu_device import CpuOffloadDevice

    register("cpu", CpuOffloadDevice)
