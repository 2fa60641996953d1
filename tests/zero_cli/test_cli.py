"""The `zero` command: --version, plugins, subcommands from plugins, errors."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from zero_cli import main
from zero_plugins import CommandResult, ZeroError, hookimpl, installed_zero_distributions

from cli_helpers import imported_modules, run_zero


def test_version_lists_every_installed_zero_distribution():
    result = run_zero("--version")
    assert result.returncode == 0
    lines = result.stdout.strip().splitlines()
    assert lines == [f"{name} {version}" for name, version in installed_zero_distributions().items()]
    assert "zero-cli 0.1.0" in lines


def test_plugins_json_is_json_alone_on_stdout():
    result = run_zero("plugins", "--json")
    assert result.returncode == 0, result.stderr
    plugins = {entry["name"]: entry for entry in json.loads(result.stdout)}
    assert plugins["cli"]["distribution"] == "zero-cli"
    assert plugins["cli"]["hooks"] == ["zero_register_commands"]


def test_plugins_table_has_headers():
    result = run_zero("plugins")
    assert result.returncode == 0
    assert result.stdout.splitlines()[0].split() == ["plugin", "distribution", "state", "hooks"]


def test_no_command_prints_usage_to_stderr_and_fails():
    result = run_zero()
    assert result.returncode == 2
    assert result.stdout == ""
    assert "usage: zero" in result.stderr


class Greeter:
    @hookimpl
    def zero_register_commands(self, cli):  # type: ignore[no-untyped-def]
        cli.add_command(
            "greet",
            help="say hello",
            add_arguments=lambda parser: parser.add_argument("who"),
            run=self.run,
        )

    @staticmethod
    def run(args):  # type: ignore[no-untyped-def]
        if args.who == "nobody":
            raise ZeroError("greet: 'nobody' is not a name; pass a name")
        return CommandResult({"greeting": f"hello {args.who}"}, f"hello {args.who}")


def test_plugin_command_prints_text_or_json(plugin_manager, capsys):
    plugin_manager.register(Greeter(), name="greeter")
    assert main(["greet", "ada"]) == 0
    assert capsys.readouterr().out == "hello ada\n"
    assert main(["greet", "ada", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"greeting": "hello ada"}


def test_user_errors_are_one_line_on_stderr(plugin_manager, capsys):
    plugin_manager.register(Greeter(), name="greeter")
    assert main(["greet", "nobody", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "zero: error: greet: 'nobody' is not a name; pass a name\n"


def test_a_second_plugin_claiming_a_command_is_left_out_naming_both(plugin_manager, capsys):
    plugin_manager.register(Greeter(), name="greeter")
    plugin_manager.register(Greeter(), name="greeter-again")
    assert main(["greet", "ada"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "hello ada\n"
    assert captured.err == (
        "zero: warning: command 'greet' is registered twice: by plugin 'greeter' (registered directly) and by "
        "plugin 'greeter-again' (registered directly); fix it, or unregister it "
        "(get_plugin_manager().unregister(name='greeter-again')); its commands are left out\n")


@pytest.mark.parametrize("args", [["plugins", "--json"], ["--version"]])
def test_cli_never_imports_torch(args):
    """Entry-point modules must stay light: `zero` starts without importing torch."""
    imported = imported_modules(*args)
    assert "zero_cli" in imported
    assert not [name for name in imported if name.split(".")[0] in {"torch", "numpy"}]


def test_closed_pipe_ends_quietly():
    """`zero plugins | head -1` must not print a BrokenPipeError traceback."""
    result = subprocess.run(
        f"{sys.executable} -m zero_cli plugins | head -1", shell=True, capture_output=True, text=True, timeout=120
    )
    assert result.stdout.startswith("plugin")
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr
