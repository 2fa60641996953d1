"""The command table that plugins fill through `zero_register_commands(cli)`."""
from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field

from zero_plugins import AddArguments, PluginError, Provenance, RunCommand, ZeroError

UNKNOWN_PLUGIN = Provenance("?", "registered directly", "")


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


@dataclass
class Command:
    name: str
    help: str
    add_arguments: AddArguments
    run: RunCommand
    plugin: Provenance
    json_flag: bool = True


@dataclass(frozen=True)
class LeftOut:
    """A plugin none of whose commands are offered, and why (one line)."""

    plugin: str  # its label: name and distribution
    problem: str


@dataclass
class CommandSet:
    """Handed to plugins as `cli` (it implements zero_plugins.CommandTable); refuses a second plugin
    claiming a command name, naming both."""

    commands: dict[str, Command] = field(default_factory=dict)
    current_plugin: Provenance = UNKNOWN_PLUGIN
    left_out: list[LeftOut] = field(default_factory=list)

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
                f"command {name!r} is registered twice: by {self.commands[name].plugin.label()} "
                f"and by {self.current_plugin.label()}; {self.current_plugin.remedy()}"
            )
        self.commands[name] = Command(name, help, add_arguments, run, self.current_plugin, json_flag)

    def collect(self, plugin: Provenance, register: Callable[[CommandSet], None]) -> None:
        """One plugin's commands, added by `register(self)`: all of them, or none if it raises.

        A plugin whose hook raises (or claims a name already taken) is left out, with the reason, so the
        other plugins' commands still run.
        """
        before = dict(self.commands)
        self.current_plugin = plugin
        try:
            register(self)
        except ZeroError as error:
            self.commands = before
            said = str(error) if isinstance(error, PluginError) else f"{plugin.label()}: {error}"
            self.left_out.append(LeftOut(plugin.label(), f"{said}; its commands are left out"))
        finally:
            self.current_plugin = UNKNOWN_PLUGIN
