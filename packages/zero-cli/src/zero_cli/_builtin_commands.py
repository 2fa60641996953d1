"""Commands built into zero-cli, registered through the same entry point as any plugin's."""
from __future__ import annotations

import argparse

from zero_plugins import CommandResult, CommandTable, PluginInfo, format_table, hookimpl, plugin_infos


@hookimpl
def zero_register_commands(cli: CommandTable) -> None:
    cli.add_command("plugins", help="list the zero plugins, their hooks and distributions", run=_run_plugins)


def _run_plugins(args: argparse.Namespace) -> CommandResult:
    infos = plugin_infos()
    rows = [(info.name, f"{info.distribution} {info.version}".strip() or "-", _state(info), ", ".join(info.hooks))
            for info in infos]
    text = format_table(["plugin", "distribution", "state", "hooks"], rows)
    return CommandResult([info.as_dict() for info in infos], text)


def _state(info: PluginInfo) -> str:
    if info.enabled:
        return "enabled"
    return f"not loaded: {info.problem}" if info.problem else "disabled (ZERO_DISABLE_PLUGINS)"
