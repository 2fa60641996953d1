"""The `cli` object that `zero_register_commands(cli)` hands to plugins, as a Protocol.

zero-cli implements it (`zero_cli.CommandSet`). It is declared here so that packages that
may not import zero-cli (zero-pin, zero-estimate, zero-core, plugins) can type their hook.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Protocol

from ._output import CommandResult

#: A command's body: the parsed arguments in, a CommandResult (or an exit code) out.
RunCommand = Callable[[argparse.Namespace], CommandResult | int]
#: Adds a command's own flags to its subparser.
AddArguments = Callable[[argparse.ArgumentParser], None]


class CommandTable(Protocol):
    """What a `zero_register_commands(cli)` implementation receives as `cli`."""

    def add_command(
        self,
        name: str,
        *,
        help: str,
        run: RunCommand,
        add_arguments: AddArguments = ...,
        json_flag: bool = ...,
    ) -> None:
        """Register `zero NAME`; see zero_cli.CommandSet.add_command."""


def add_action_json_flag(parser: argparse.ArgumentParser) -> None:
    """`--json` on an action's subparser (`zero swap bench --json`) as well as on its command's.

    `zero swap --json check` sets it on the command's parser; SUPPRESS keeps this default from undoing that.
    """
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print the report as JSON alone on stdout")
