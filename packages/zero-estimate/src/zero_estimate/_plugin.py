"""Hook implementations of zero-estimate, loaded through the `zero` entry point; imports no torch at module level."""
from __future__ import annotations

from typing import Any

from zero_plugins import CommandTable, hookimpl


@hookimpl
def zero_register_commands(cli: CommandTable) -> None:
    from . import _cli  # the command's modules load only when a command runs or --help is built

    cli.add_command(
        "estimate",
        help="memory per GPU and per node for each ZeRO stage, copy by copy and phase by phase",
        add_arguments=_cli.add_estimate_arguments,
        run=_cli.run_estimate,
    )
    cli.add_command(
        "plan",
        help="the ZeRO configurations that fit your GPUs, host memory and NVMe, cheapest first",
        add_arguments=_cli.add_plan_arguments,
        run=_cli.run_plan,
    )


@hookimpl
def zero_estimate_memory(request: dict[str, Any]) -> dict[str, Any]:
    """zero-core's hookspec: the estimate of a live module trained with a ds_config (see _profile_hook)."""
    from ._profile_hook import estimate_memory  # loads only when `zero profile` asks

    return estimate_memory(request)


@hookimpl
def zero_estimate_check(request: dict[str, Any]) -> None:
    """zero-core's hookspec: refuse, before anything is traced, a setting the estimate cannot take."""
    from ._profile_hook import check_request

    check_request(request)
