"""The process-wide plugin manager.

One manager serves every zero-* package: a package that calls a hook adds its
hookspecs to it on first use (`use_hookspecs`), so `zero plugins` sees every plugin
and entry points are loaded only once per process.
"""
from __future__ import annotations

import os
import threading
import warnings
from types import ModuleType

import pluggy

from ._distribution import ZeroPluginManager
from ._errors import PluginLoadWarning
from ._loading import LoadFailure, load_entry_points
from ._markers import ENTRY_POINT_GROUP, PROJECT_NAME

DISABLE_ENV = "ZERO_DISABLE_PLUGINS"

_lock = threading.Lock()
_manager: pluggy.PluginManager | None = None
_added_specs: list[ModuleType | type] = []
_failures: list[LoadFailure] = []


def disabled_plugin_names() -> list[str]:
    """Names listed in ZERO_DISABLE_PLUGINS (comma separated, blanks ignored)."""
    raw = os.environ.get(DISABLE_ENV, "")
    return [name.strip() for name in raw.split(",") if name.strip()]


def get_plugin_manager() -> pluggy.PluginManager:
    """Return the manager, loading the `zero` entry points on first call.

    An entry point that cannot be loaded is skipped with one PluginLoadWarning (the `zero` command
    prints it as one line instead); `plugin_load_failures()` lists them.
    """
    global _manager
    with _lock:
        if _manager is None:
            manager = ZeroPluginManager(PROJECT_NAME)
            for name in disabled_plugin_names():
                manager.set_blocked(name)
            _failures[:] = load_entry_points(manager, ENTRY_POINT_GROUP)
            for failure in _failures:
                warnings.warn(failure.message(), PluginLoadWarning, stacklevel=2)
            _manager = manager
        return _manager


def plugin_load_failures() -> list[LoadFailure]:
    """The entry points the manager could not load (loading them first if it has not yet)."""
    get_plugin_manager()
    with _lock:
        return list(_failures)


def use_hookspecs(module_or_class: ModuleType | type) -> pluggy.PluginManager:
    """Add a package's hookspecs to the manager (idempotent) and return the manager."""
    manager = get_plugin_manager()
    with _lock:
        if not any(spec is module_or_class for spec in _added_specs):
            manager.add_hookspecs(module_or_class)
            _added_specs.append(module_or_class)
    return manager


def reset_plugin_manager() -> None:
    """Forget the manager so the next call reloads entry points (tests, env changes)."""
    global _manager
    with _lock:
        _manager = None
        _added_specs.clear()
        _failures.clear()
