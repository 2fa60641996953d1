"""The `zero` command with a broken plugin: one that cannot load, whose hook raises, whose name is a
built-in's, or whose command raises or returns the wrong type. Each is one line naming the plugin; the
other commands go on; `--json` keeps stdout valid JSON or empty; never a traceback."""
from __future__ import annotations

import json
import math
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from zero_plugins import CommandResult, DetailedError, hookimpl

from cli_helpers import run_main, run_zero
from plugin_dists import write_distribution

BROKEN = "raise ImportError('libdevice.so.3: cannot open shared object file')\n"


def _load_problem(plugin_folder: Path) -> str:
    return ("plugin 'broken' from zero-broken 1.0 (entry point broken = cli_isolation_broken) was not loaded: "
            "importing it raised ImportError('libdevice.so.3: cannot open shared object file') at "
            f"{plugin_folder / 'cli_isolation_broken.py'}:1; its hooks are skipped; update or uninstall zero-broken, or "
            "block the plugin with ZERO_DISABLE_PLUGINS=broken")


def test_a_plugin_that_cannot_load_is_one_line_and_other_commands_run(plugin_folder: Path) -> None:
    write_distribution(plugin_folder, "zero-broken", "1.0", {"broken": "cli_isolation_broken"},
                       {"cli_isolation_broken": BROKEN})
    # A fresh interpreter: the `zero` command as a user runs it, entry points found by importlib.metadata.
    result = run_zero("plugins", "--json", PYTHONPATH=os.pathsep.join([str(plugin_folder), *sys.path]))
    assert result.returncode == 0, result.stderr
    assert result.stderr == f"zero: warning: {_load_problem(plugin_folder)}\n"
    listed = {entry["name"]: entry for entry in json.loads(result.stdout)}
    assert listed["broken"] == {"name": "broken", "hooks": [], "distribution": "zero-broken", "version": "1.0",
                                "enabled": False, "problem": _load_problem(plugin_folder).split(" was not loaded: ")[1]}
    assert listed["cli"]["enabled"] is True


def test_a_command_of_a_plugin_that_did_not_load_fails_naming_it(plugin_folder: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    write_distribution(plugin_folder, "zero-broken", "1.0", {"broken": "cli_isolation_broken"},
                       {"cli_isolation_broken": BROKEN})
    code, out, err = run_main(capsys, "broken-status", "--json")  # the warning is the command's line, not Python's
    assert (code, out) == (2, "")
    warning, error = err.splitlines()
    assert warning == f"zero: warning: {_load_problem(plugin_folder)}"
    assert error.startswith("zero: error: no command 'broken-status'; it may be one of a plugin that is missing "
                            "(said above): plugin 'broken' from zero-broken 1.0 (entry point broken = "
                            "cli_isolation_broken); fix that plugin, or run one of ")
    assert "plugins" in error.rsplit("run one of ", 1)[1].split(", ")


def test_a_plugin_may_not_take_a_built_in_name(plugin_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = ("from zero_plugins import hookimpl\n\n@hookimpl\ndef zero_register_commands(cli):\n"
              "    cli.add_command('impostor', help='x', run=lambda args: 0)\n")
    write_distribution(plugin_folder, "zero-impostor", "6.6", {"cli": "cli_isolation_impostor"},
                       {"cli_isolation_impostor": source})
    code, out, err = run_main(capsys, "plugins", "--json")
    assert code == 0
    assert [(entry["distribution"], entry["enabled"]) for entry in json.loads(out) if entry["name"] == "cli"] == [
        ("zero-cli", True), ("zero-impostor", False)]
    assert err == ("zero: warning: plugin 'cli' from zero-impostor 6.6 (entry point cli = cli_isolation_impostor) "
                   f"was not loaded: the name 'cli' belongs to plugin 'cli' from zero-cli {metadata.version('zero-cli')}, a "
                   "built-in; its "
                   "name must change in zero-impostor's [project.entry-points.zero] table (or uninstall "
                   "zero-impostor)\n")
    assert "cli_isolation_impostor" not in sys.modules


class RaisingHook:
    @hookimpl
    def zero_register_commands(self, cli):  # type: ignore[no-untyped-def]
        cli.add_command("half", help="registered before the hook raised", run=lambda args: 0)
        raise AttributeError("'NoneType' object has no attribute 'device'")


def test_a_commands_hook_that_raises_leaves_that_plugin_out(plugin_manager, capsys: pytest.CaptureFixture[str]):
    plugin_manager.register(RaisingHook(), name="raising")
    code, out, err = run_main(capsys, "plugins")
    assert code == 0
    line = RaisingHook.zero_register_commands.__code__.co_firstlineno + 3
    assert err == ("zero: warning: plugin 'raising' (registered directly) raised AttributeError(\"'NoneType' object "
                   f"has no attribute 'device'\") in its zero_register_commands hook at {__file__}:{line}; fix it, "
                   "or unregister it (get_plugin_manager().unregister(name='raising')); its commands are left out\n")
    code, out, err = run_main(capsys, "half")  # all of its commands or none: not the one added before it raised
    assert code == 2 and "no command 'half'" in err.splitlines()[-1]


def _boom(args: Any) -> CommandResult:
    raise ZeroDivisionError("division by zero")


class Returns:
    """A plugin whose command `bad` does what the test sets in `Returns.run`."""

    run: Any = None

    @hookimpl
    def zero_register_commands(self, cli):  # type: ignore[no-untyped-def]
        cli.add_command("bad", help="misbehaves", run=lambda args: Returns.run(args))


WRONG = [
    (lambda args: None, "returned NoneType None, which is neither a zero_plugins.CommandResult nor an exit status "
                        "(an int, 0 to 255)"),
    (lambda args: True, "returned bool True, which is neither a zero_plugins.CommandResult nor an exit status "
                        "(an int, 0 to 255)"),
    (lambda args: 256, "returned int 256, which is neither a zero_plugins.CommandResult nor an exit status "
                       "(an int, 0 to 255)"),
    (lambda args: {"ok": 1}, "returned dict {'ok': 1}, which is neither a zero_plugins.CommandResult nor an exit "
                             "status (an int, 0 to 255)"),
    (lambda args: CommandResult({}, "text", exit_code="1"),  # type: ignore[arg-type]
     "returned a CommandResult whose exit_code is str '1', not an int 0 to 255"),
    (lambda args: CommandResult({}, ["a", "b"]),  # type: ignore[arg-type]
     "returned a CommandResult whose text is list, not str"),
]


@pytest.mark.parametrize(("run", "problem"), WRONG, ids=[problem.split(",")[0] for _, problem in WRONG])
@pytest.mark.parametrize("as_json", [False, True])
def test_a_command_returning_the_wrong_type_is_one_line(plugin_manager, capsys: pytest.CaptureFixture[str],
                                                       run: Any, problem: str, as_json: bool) -> None:
    plugin_manager.register(Returns(), name="returns")
    Returns.run = run
    code, out, err = run_main(capsys, "bad", *(["--json"] if as_json else []))
    assert (code, out) == (2, "")
    assert err == (f"zero: error: command 'bad' of plugin 'returns' (registered directly) {problem}; fix it, or "
                   "unregister it (get_plugin_manager().unregister(name='returns'))\n")


def test_a_command_that_raises_is_one_line_naming_the_plugin(plugin_manager, capsys: pytest.CaptureFixture[str]):
    plugin_manager.register(Returns(), name="returns")
    Returns.run = _boom
    code, out, err = run_main(capsys, "bad", "--json")
    assert (code, out) == (2, "")
    line = _boom.__code__.co_firstlineno + 1
    assert err == ("zero: error: command 'bad' of plugin 'returns' (registered directly) raised "
                   f"ZeroDivisionError('division by zero') at {__file__}:{line}; fix it, or unregister it "
                   "(get_plugin_manager().unregister(name='returns'))\n")


@pytest.mark.parametrize(("data", "problem"), [
    ({"ratio": math.nan}, "Out of range float values are not JSON compliant: nan"),
    ({(1, 2): "pair"}, "keys must be str, int, float, bool or None, not tuple"),
])
def test_json_that_cannot_be_written_leaves_stdout_empty(plugin_manager, capsys: pytest.CaptureFixture[str],
                                                         data: dict[Any, Any], problem: str) -> None:
    plugin_manager.register(Returns(), name="returns")
    Returns.run = lambda args: CommandResult(data, "fine as text")
    assert run_main(capsys, "bad") == (0, "fine as text\n", "")
    code, out, err = run_main(capsys, "bad", "--json")
    assert (code, out) == (2, "")
    assert err == (f"zero: error: command 'bad' of plugin 'returns' (registered directly) returned data that is "
                   f"not JSON ({problem}); fix it, or unregister it "
                   "(get_plugin_manager().unregister(name='returns'))\n")


def test_a_detailed_error_keeps_its_line_breaks(plugin_manager, capsys: pytest.CaptureFixture[str]) -> None:
    traceback = 'Traceback (most recent call last):\n  File "rank.py", line 3, in step\nMemoryError: out\n'
    plugin_manager.register(Returns(), name="returns")

    def fails(args: Any) -> CommandResult:
        raise DetailedError("rank 1 of 2 failed; its traceback:", traceback)

    Returns.run = fails
    code, out, err = run_main(capsys, "bad")
    assert (code, out) == (2, "")
    assert err == f"zero: error: rank 1 of 2 failed; its traceback:\n{traceback}"
    assert str(DetailedError("one\nline", "")) == "one\nline"
