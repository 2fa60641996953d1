"""zero-offload's hook implementations, loaded through the `zero` entry point.

Imports no torch at module level: the device and swap-backend classes (and the `zero report`
section) are imported inside the hooks, and `zero swap`'s module imports no torch or config until it runs.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from zero_plugins import CommandTable, hookimpl

if TYPE_CHECKING:
    from zero_core.report import ReportTable


@hookimpl
def zero_register_offload_devices(register: Callable[[str, type], None]) -> None:
    from ._cpu_device import CpuOffloadDevice
    from .nvme import NvmeOffloadDevice

    register("cpu", CpuOffloadDevice)
    register("nvme", NvmeOffloadDevice)


@hookimpl
def zero_register_swap_backends(register: Callable[[str, type], None]) -> None:
    from .swap import IoUringBackend, ThreadsBackend

    register("threads", ThreadsBackend)
    register("io_uring", IoUringBackend)


@hookimpl
def zero_register_commands(cli: CommandTable) -> None:
    from .swap import add_swap_arguments, swap_command

    cli.add_command("swap", help="list the swap-I/O backends, or measure one against raw O_DIRECT (bench)",
                    add_arguments=add_swap_arguments, run=swap_command)


@hookimpl
def zero_register_report_sections(register: Callable[[str, str, Callable[[], ReportTable]], None]) -> None:
    from .swap import SWAP_REPORT_KEY, SWAP_REPORT_TITLE, swap_backends_table

    register(SWAP_REPORT_KEY, SWAP_REPORT_TITLE, swap_backends_table)
