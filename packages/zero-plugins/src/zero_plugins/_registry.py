"""Name-to-class registries fed by `zero_register_*(register)` hooks, and selection among them.

Each package that calls such a hook owns one `NamedRegistry`. The hook hands every
plugin a `register(name, cls)` callback tagged with that plugin, so a duplicate name
can be reported with both providers. Entries are collected on each call (cheap:
hooks only import and register classes) so plugins registered by tests or after
start-up are always seen. The registry also holds what every selector needs: the
name chosen by an environment variable or the default, each implementation's status
with its reason, and instances shared by the whole process.
"""
from __future__ import annotations

import difflib
import os
import threading
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable, Generic, Protocol, TypedDict, TypeVar

from ._distribution import Provenance
from ._errors import PluginError
from ._hooks import plugin_hooks
from ._manager import get_plugin_manager, plugin_load_failures, use_hookspecs


class Checkable(Protocol):
    """What a registry asks of every registered class before one is made."""

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """(usable, reason): why not, or what was found. Must not raise or build anything."""
        ...


T = TypeVar("T", bound=Checkable)


class Status(TypedDict):
    """One registered implementation as `zero report` and the `check` commands list it."""

    name: str
    available: bool
    reason: str
    distribution: str
    selected: bool


@dataclass(frozen=True)
class Registration(Generic[T]):
    name: str
    cls: type[T]
    provider: Provenance


@dataclass(eq=False, kw_only=True)
class NamedRegistry(Generic[T]):
    """Collects implementations of `base` registered through `hook_name`.

    kind:     what is registered, for messages ("accelerator", "pin backend").
    base:     the class every registration must subclass; the registry's T. It is typed
              `type`, not `type[T]`, because mypy accepts no abstract class for `type[T]`
              and bases are ABCs, so declare T where the registry is made:
              `REGISTRY: NamedRegistry[PinBackend] = NamedRegistry(..., base=PinBackend, ...)`.
    env_var:  the variable that selects one by name.
    default:  the name used when env_var is unset; None where the caller chooses (auto-detection).
    """

    kind: str
    hook_name: str
    hookspecs: ModuleType | type
    base: type
    env_var: str
    default: str | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    # One instance per registered (name, class) for the whole process: a backend's state
    # (the native pin backend's address ranges) must be shared by every caller.
    _instances: dict[tuple[str, type[T]], T] = field(default_factory=dict, init=False, repr=False)
    # Looking a name up calls every plugin's hook (~0.1 ms) and shared instances serve
    # per-tensor calls, so a resolved name is remembered until the set of plugins changes.
    _resolved: dict[str, T] = field(default_factory=dict, init=False, repr=False)
    _resolved_for: list[tuple[str, object]] = field(default_factory=list, init=False, repr=False)

    def registrations(self) -> dict[str, Registration[T]]:
        manager = use_hookspecs(self.hookspecs)
        found: dict[str, Registration[T]] = {}
        for hook in plugin_hooks(manager, self.hook_name):
            hook(register=self._register_into(found, hook.plugin))
        return found

    def _register_into(
        self, found: dict[str, Registration[T]], provider: Provenance
    ) -> Callable[[str, type[T]], None]:
        def register(name: str, cls: type[T]) -> None:
            if not isinstance(cls, type) or not issubclass(cls, self.base):
                raise PluginError(
                    f"{provider.label()} registered {self.kind} {name!r} as {cls!r}, "
                    f"which is not a subclass of {self.base.__module__}.{self.base.__qualname__}"
                )
            if name in found:
                raise PluginError(
                    f"{self.kind} {name!r} is registered twice: by {found[name].provider.label()} "
                    f"and by {provider.label()}; uninstall one, or block it with "
                    f"ZERO_DISABLE_PLUGINS={provider.plugin}"
                )
            found[name] = Registration(name, cls, provider)

        return register

    def names(self) -> list[str]:
        return sorted(self.registrations())

    def get(self, name: str) -> Registration[T]:
        found = self.registrations()
        if name not in found:
            raise PluginError(self._unknown_message(name, found))
        return found[name]

    def requested_name(self) -> str | None:
        """The name set in the selecting environment variable, or None when unset/blank."""
        value = os.environ.get(self.env_var, "").strip()
        return value or None

    def selected_name(self) -> str | None:
        """The name set in env_var, else the default (None: nothing chosen yet)."""
        return self.requested_name() or self.default

    def availability(self, cls: type[T]) -> tuple[bool, str]:
        """cls.available(), with a check that raises reported as unusable."""
        try:
            usable, reason = cls.available()
        except Exception as error:  # a plugin's broken check must not hide the other implementations
            return False, f"available() raised {error!r}"
        return bool(usable), str(reason)

    def statuses(self, selected: str | None = None) -> list[Status]:
        """One row per registration, by name; `selected` defaults to selected_name(). Builds nothing."""
        chosen = selected or self.selected_name()
        rows: list[Status] = []
        for name, registration in sorted(self.registrations().items()):
            usable, reason = self.availability(registration.cls)
            rows.append({"name": name, "available": usable, "reason": reason,
                         "distribution": registration.provider.distribution, "selected": name == chosen})
        return rows

    def usable_listing(self) -> str:
        """The usable implementations as "name (distribution), ...", or "none"; for error messages."""
        usable = [f"{row['name']} ({row['distribution']})" for row in self.statuses() if row["available"]]
        return ", ".join(usable) or "none"

    def shared_instance(self, name: str, make: Callable[[str, type[T]], T]) -> T:
        """The process-wide instance registered as `name`, made once by make(name, cls)."""
        plugins = get_plugin_manager().list_name_plugin()
        with self._lock:
            if plugins != self._resolved_for:
                self._resolved.clear()
                self._resolved_for = plugins
            if name not in self._resolved:
                cls = self.get(name).cls
                if (name, cls) not in self._instances:
                    self._instances[name, cls] = make(name, cls)
                self._resolved[name] = self._instances[name, cls]
            return self._resolved[name]

    def _unknown_message(self, name: str, found: dict[str, Registration[T]]) -> str:
        available = ", ".join(
            f"{reg.name} ({reg.provider.distribution})" for reg in sorted(found.values(), key=lambda r: r.name)
        ) or "none"
        hint = difflib.get_close_matches(name, list(found), n=1)
        did_you_mean = f", did you mean {hint[0]!r}?" if hint else ""
        # The one asked for may be a plugin that could not be loaded: say so, or the user hunts for a typo.
        failed = "".join(f"; not loaded: {failure.message()}" for failure in plugin_load_failures())
        return (
            f"unknown {self.kind} {name!r} (from {self.env_var}){did_you_mean}; "
            f"available: {available}{failed}"
        )
