"""Errors that the `zero` command prints as one line, without a traceback."""
from __future__ import annotations


class ZeroError(Exception):
    """Base of every error caused by user input (config, environment, arguments).

    The message must name what was wrong and how to fix it.
    """


class PluginError(ZeroError):
    """An unknown plugin name, a duplicate registration, a plugin of the wrong type, or a hook
    implemented as a wrapper (zero calls its hooks directly, so a wrapper would never run)."""
