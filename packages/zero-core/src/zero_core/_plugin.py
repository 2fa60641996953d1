"""zero-core's hook implementations, loaded through the `zero` entry point.

Imports no torch at module level: the classes, the report and the checkpoint commands are imported inside
the hooks and commands.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zero_plugins import CommandResult, CommandTable, hookimpl

if TYPE_CHECKING:
    from .accelerator import Accelerator


@hookimpl
def zero_register_accelerators(register: Callable[[str, type[Accelerator]], None]) -> None:
    from .accelerator.cpu import CpuAccelerator
    from .accelerator.cuda import CudaAccelerator

    register("cpu", CpuAccelerator)
    register("cuda", CudaAccelerator)


@hookimpl
def zero_register_commands(cli: CommandTable) -> None:
    # The argument modules import no torch (the lazy packages load only what is asked for).
    from .checkpoint import add_checkpoint_arguments
    from .launch import add_launch_arguments
    from .profile import add_profile_arguments

    cli.add_command(
        "report",
        help="environment report, like ds_report: python, torch, accelerators, pin backends, build tools, "
             "plugins' sections (swap backends), plugins",
        run=_run_report,
    )
    cli.add_command(
        "checkpoint",
        help="inspect a save_dir's checkpoints (inspect), or write one as a Hugging Face model directory (export)",
        add_arguments=add_checkpoint_arguments,
        run=_run_checkpoint,
    )
    cli.add_command(
        "profile",
        help="train a model on local ranks at each ZeRO stage: memory per phase and category, measured beside "
             "the estimate, every gap explained",
        add_arguments=add_profile_arguments,
        run=_run_profile,
    )
    cli.add_command(
        "launch",
        help="torchrun [its options] program.py [args], with `import deepspeed` resolving to zero_core in the "
             "processes it starts and --local_rank=<n> passed as DeepSpeed's launcher does",
        add_arguments=add_launch_arguments,
        run=_run_launch,
        json_flag=False,  # the ranks' own output is what it prints
    )


@hookimpl
def zero_verify_candidate(request: dict[str, Any]) -> dict[str, Any]:
    """zero-estimate's hookspec (`zero plan --verify`): one configuration's peaks, traced by the dry run."""
    from .profile import verify_candidate  # torch loads only when `zero plan --verify` asks

    return verify_candidate(request)


def _run_report(args: argparse.Namespace) -> CommandResult:
    from .report import build_report

    return build_report()


def _run_checkpoint(args: argparse.Namespace) -> CommandResult:
    from .checkpoint import checkpoint_command

    return checkpoint_command(args)


def _run_profile(args: argparse.Namespace) -> CommandResult:
    from .profile import profile_command

    return profile_command(args)


def _run_launch(args: argparse.Namespace) -> int:
    from .launch import launch_command

    return launch_command(args)
