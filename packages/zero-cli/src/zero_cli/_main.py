"""Entry point of the `zero` command."""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from zero_plugins import CommandResult, ZeroError, installed_zero_distributions, plain_hookimpls, use_hookspecs

from . import _hookspecs
from ._commands import CommandSet


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
    manager = use_hookspecs(_hookspecs)
    commands = CommandSet()
    for impl in plain_hookimpls(manager, "zero_register_commands"):
        commands.current_plugin = impl.plugin_name
        impl.function(cli=commands)
    return commands


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
    try:
        commands = collect_commands()
        parser = build_parser(commands)
        args = parser.parse_args(argv)
        if not getattr(args, "_command", None):
            parser.print_help(sys.stderr)
            return 2
        result = args._command.run(args)
    except ZeroError as error:
        # Exit 2 like argparse's own usage errors: the input was wrong, not the program.
        print(f"zero: error: {str(error).translate(_ESCAPED)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    if not isinstance(result, CommandResult):
        return int(result or 0)
    try:
        if getattr(args, "json", False):
            print(json.dumps(result.data, indent=2, default=str))
        elif result.text:
            print(result.text)
        sys.stdout.flush()
    except BrokenPipeError:
        # `zero report | head` closed the pipe: stop quietly, as other CLI tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
