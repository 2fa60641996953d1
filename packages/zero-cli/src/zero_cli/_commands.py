"""The command table that plugins fill through `zero_register_commands(cli)`."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from zero_plugins import AddArguments, PluginError, RunCommand


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


@dataclass
class Command:
    name: str
    help: str
    add_arguments: AddArguments
    run: RunCommand
    plugin: str
    json_flag: bool = True


@dataclass
class CommandSet:
    """Handed to plugins as `cli` (it implements zero_plugins.CommandTable); rejects two plugins
    claiming one command name."""

    commands: dict[str, Command] = field(default_factory=dict)
    current_plugin: str = "?"

    def add_command(
        self,
        name: str,
        *,
        help: str,
        run: RunCommand,
        add_arguments: AddArguments = _no_arguments,
        json_flag: bool = True,
    ) -> None:
        """Register `zero NAME`. `run(args)` returns a CommandResult or an exit code.

        With json_flag (the default) the command gets `--json`, and its CommandResult.data
        is printed as JSON alone on stdout.
        """
        if name in self.commands:
            raise PluginError(
                f"command {name!r} is registered twice: by plugin {self.commands[name].plugin!r} "
                f"and by plugin {self.current_plugin!r}"
            )
        self.commands[name] = Command(name, help, add_arguments, run, self.current_plugin, json_flag)
