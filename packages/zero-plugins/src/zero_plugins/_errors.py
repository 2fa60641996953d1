"""Errors that the `zero` command prints as one line, without a traceback."""
from __future__ import annotations

import traceback


class ZeroError(Exception):
    """Base of every error caused by user input (config, environment, arguments).

    The message must name what was wrong and how to fix it.
    """


class DetailedError(ZeroError):
    """A ZeroError followed by text whose line breaks matter (a rank's traceback).

    str() is the message, then the detail on the lines below it; the `zero` command prints the message
    on one line and the detail as it is, so a traceback is never flattened onto one line.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(f"{message}\n{detail}" if detail else message)
        self.message = message
        self.detail = detail


class PluginError(ZeroError):
    """An unknown plugin name, a duplicate registration, a plugin of the wrong type, or a hook
    implemented as a wrapper (zero calls its hooks directly, so a wrapper would never run)."""


class PluginHookError(PluginError):
    """A plugin's hook, or its command, raised (or returned what it must not); the original is chained."""


class PluginLoadWarning(UserWarning):
    """An entry point of the `zero` group was not loaded (its import raised, or its name is taken)."""


def raised_at(error: BaseException) -> str:
    """" at FILE:LINE" of the innermost frame of `error` outside Python's import machinery, or ""."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if not frame.filename.startswith("<")]
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
