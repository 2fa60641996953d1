"""Entry point of the `zero` command."""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from functools import partial
from typing import Any, NoReturn

from zero_plugins import (
    CommandResult,
    DetailedError,
    PluginError,
    PluginHook,
    PluginLoadWarning,
    ZeroError,
    installed_zero_distributions,
    plugin_hooks,
    plugin_load_failures,
    use_hookspecs,
)

from . import _hookspecs
from ._commands import CommandSet, LeftOut
from ._running import rendered, run_command

HOOK = "zero_register_commands"


class _VersionAction(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print every installed zero-* distribution and exit")

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        print("\n".join(f"{name} {version}" for name, version in installed_zero_distributions().items()))
        parser.exit()


# Every character str.splitlines() breaks at: an error stays on one line, with them shown escaped.
_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_ESCAPED = str.maketrans({ch: ch.encode("unicode_escape").decode("ascii") for ch in _LINE_BREAKS})


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line (argparse prints the usage first); --help still shows it.

    Sub-parsers, and the parsers plugins add below them, are made of this class too.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message.translate(_ESCAPED)}; see {self.prog} --help\n")


def collect_commands() -> CommandSet:
    """Every plugin's commands; a plugin whose hook raises, or that claims a taken name, is left out."""
    manager = use_hookspecs(_hookspecs)
    commands = CommandSet()
    for hook in plugin_hooks(manager, HOOK):
        commands.collect(hook.plugin, partial(_register, hook))
    return commands


def _register(hook: PluginHook, cli: CommandSet) -> None:
    hook(cli=cli)


def plugin_problems(commands: CommandSet) -> list[LeftOut]:
    """The plugins whose commands are missing: entry points not loaded, and plugins left out."""
    return [LeftOut(failure.label(), failure.message()) for failure in plugin_load_failures()] + commands.left_out


def _check_command_offered(argv: Sequence[str], commands: CommandSet, problems: list[LeftOut]) -> None:
    """A command that is not offered while a plugin is missing: name that plugin, not only "invalid choice"."""
    # The top-level options (--version, --help) take no value, so the first other word is the command.
    name = next((arg for arg in argv if not arg.startswith("-")), None)
    if name is None or name in commands.commands or not problems:
        return
    raise PluginError(f"no command {name!r}; it may be one of a plugin that is missing (said above): "
                      f"{', '.join(problem.plugin for problem in problems)}; fix that plugin, or run one of "
                      f"{', '.join(sorted(commands.commands))}")


def build_parser(commands: CommandSet) -> argparse.ArgumentParser:
    parser = _Parser(prog="zero", description="ZeRO memory optimization for PyTorch training.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in sorted(commands.commands):
        command = commands.commands[name]
        sub_parser = sub.add_parser(name, help=command.help, description=command.help)
        if command.json_flag:
            sub_parser.add_argument("--json", action="store_true", help="print the report as JSON alone on stdout")
        command.add_arguments(sub_parser)
        sub_parser.set_defaults(_command=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        with warnings.catch_warnings():  # said below as the command's own lines, once each
            warnings.simplefilter("ignore", PluginLoadWarning)
            commands = collect_commands()
        problems = plugin_problems(commands)
        for problem in problems:
            print(f"zero: warning: {problem.problem.translate(_ESCAPED)}", file=sys.stderr)
        parser = build_parser(commands)
        _check_command_offered(argv, commands, problems)
        args = parser.parse_args(argv)
        if not getattr(args, "_command", None):
            parser.print_help(sys.stderr)
            return 2
        result = run_command(args._command, args)
        if not isinstance(result, CommandResult):
            return result
        output = rendered(args._command, result, getattr(args, "json", False))
    except ZeroError as error:
        # Exit 2 like argparse's own usage errors: the input was wrong, not the program.
        message = error.message if isinstance(error, DetailedError) else str(error)
        print(f"zero: error: {message.translate(_ESCAPED)}", file=sys.stderr)
        if isinstance(error, DetailedError) and error.detail:  # a rank's traceback: its line breaks kept
            print(error.detail.rstrip("\n"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    try:
        if output:
            print(output)
        sys.stdout.flush()
    except BrokenPipeError:
        # `zero report | head` closed the pipe: stop quietly, as other CLI tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
