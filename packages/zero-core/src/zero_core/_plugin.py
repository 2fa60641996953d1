"""zero-core's hook implementations, loaded through the `zero` entry point.

Imports no torch at module level: the classes and the report are imported inside the hooks.
"""
from __future__ import annotations

from zero_plugins import hookimpl


@hookimpl
def zero_register_accelerators(register) -> None:  # type: ignore[no-untyped-def]
    from .accelerator.cpu import CpuAccelerator
    from .accelerator.cuda import CudaAccelerator

    register("cpu", CpuAccelerator)
    register("cuda", CudaAccelerator)


@hookimpl
def zero_register_commands(cli) -> None:  # type: ignore[no-untyped-def]
    cli.add_command(
        "report",
        help="environment report, like ds_report: python, torch, accelerators, pin backends, build tools, plugins",
        run=_run_report,
    )


def _run_report(args):  # type: ignore[no-untyped-def]
    from .report import build_report

    return build_report()
