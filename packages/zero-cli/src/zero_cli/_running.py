"""Running one command and printing what it returned; a command that raises or returns the wrong type
is one error naming its plugin, never a traceback."""
from __future__ import annotations

import argparse
import json

from zero_plugins import CommandResult, PluginHookError, ZeroError, raised_at

from ._commands import Command

MAX_EXIT_STATUS = 255  # the kernel keeps the low 8 bits: 256 would read as success


def run_command(command: Command, args: argparse.Namespace) -> CommandResult | int:
    """command.run(args), checked; PluginHookError naming the plugin if it raises or returns the wrong type."""
    try:
        result = command.run(args)
    except ZeroError:  # the command's refusal of the user's input: it says what to fix
        raise
    except Exception as error:
        raise _failed(command, f"raised {error!r}{raised_at(error)}") from error
    problem = _result_problem(result)
    if problem is not None:
        raise _failed(command, problem)
    return result


def rendered(command: Command, result: CommandResult, as_json: bool) -> str:
    """What to print for `result`: its data as strict JSON (--json), or its text; built before anything prints."""
    if not as_json:
        return result.text
    try:
        return json.dumps(result.data, indent=2, default=str, allow_nan=False)
    except (ValueError, TypeError, RecursionError) as error:  # NaN, a cycle, a key JSON cannot hold
        raise _failed(command, f"returned data that is not JSON ({error})") from error


def _result_problem(result: object) -> str | None:
    if isinstance(result, CommandResult):
        if not isinstance(result.text, str):
            return f"returned a CommandResult whose text is {type(result.text).__name__}, not str"
        code: object = result.exit_code
    else:
        code = result
    if isinstance(code, int) and not isinstance(code, bool) and 0 <= code <= MAX_EXIT_STATUS:
        return None
    if result is code:
        return (f"returned {_shown(result)}, which is neither a zero_plugins.CommandResult nor an exit "
                f"status (an int, 0 to {MAX_EXIT_STATUS})")
    return f"returned a CommandResult whose exit_code is {_shown(code)}, not an int 0 to {MAX_EXIT_STATUS}"


def _shown(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def _failed(command: Command, problem: str) -> PluginHookError:
    return PluginHookError(f"command {command.name!r} of {command.plugin.label()} {problem}; "
                           f"{command.plugin.remedy()}")
