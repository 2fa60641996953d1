"""zero-core's hook implementations, loaded through the `zero` entry point.

Imports no torch at module level: the classes and the report are imported inside the hooks.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from zero_plugins import CommandResult, CommandTable, hookimpl

if TYPE_CHECKING:
    import argparse

    from .accelerator import Accelerator


@hookimpl
def zero_register_accelerators(register: Callable[[str, type[Accelerator]], None]) -> None:
    from .accelerator.cpu import CpuAccelerator
    from .accelerator.cuda import CudaAccelerator

    register("cpu", CpuAccelerator)
    register("cuda", CudaAccelerator)


@hookimpl
def zero_register_commands(cli: CommandTable) -> None:
    cli.add_command(
        "report",
        help="environment report, like ds_report: python, torch, accelerators, pin backends, build tools, "
             "plugins' sections (swap backends), plugins",
        run=_run_report,
    )


def _run_report(args: argparse.Namespace) -> CommandResult:
    from .report import build_report

    return build_report()
