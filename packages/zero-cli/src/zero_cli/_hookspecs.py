"""Hooks called by zero-cli."""
from __future__ import annotations

from zero_plugins import CommandTable, hookspec


@hookspec
def zero_register_commands(cli: CommandTable) -> None:
    """Add subcommands with `cli.add_command(name, help=..., add_arguments=..., run=...)`.

    Import nothing heavy here: the body runs every time `zero` starts.
    """
