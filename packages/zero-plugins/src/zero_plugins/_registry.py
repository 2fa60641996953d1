"""Name-to-class registries fed by `zero_register_*(register)` hooks.

Each package that calls such a hook owns one `NamedRegistry`. The hook hands every
plugin a `register(name, cls)` callback tagged with that plugin, so a duplicate name
can be reported with both providers. Entries are collected on each call (cheap:
hooks only import and register classes) so plugins registered by tests or after
start-up are always seen.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Generic, TypeVar

from ._distribution import Provenance, provenance
from ._errors import PluginError
from ._hooks import plain_hookimpls
from ._manager import use_hookspecs

T = TypeVar("T")


@dataclass(frozen=True)
class Registration(Generic[T]):
    name: str
    cls: type[T]
    provider: Provenance


class NamedRegistry(Generic[T]):
    """Collects implementations of `base` registered through `hook_name`.

    kind:     what is registered, for messages ("accelerator", "pin backend").
    base:     the class every registration must subclass; the registry's T. It is typed
              `type`, not `type[T]`, because mypy accepts no abstract class for `type[T]`
              and bases are ABCs, so declare T where the registry is made:
              `REGISTRY: NamedRegistry[PinBackend] = NamedRegistry(..., base=PinBackend, ...)`.
    env_var:  the variable that selects one by name.
    """

    def __init__(
        self,
        *,
        kind: str,
        hook_name: str,
        hookspecs: ModuleType | type,
        base: type,
        env_var: str,
    ) -> None:
        self.kind = kind
        self.hook_name = hook_name
        self.hookspecs = hookspecs
        self.base = base
        self.env_var = env_var

    def registrations(self) -> dict[str, Registration[T]]:
        manager = use_hookspecs(self.hookspecs)
        found: dict[str, Registration[T]] = {}
        for impl in plain_hookimpls(manager, self.hook_name):
            provider = provenance(manager, impl.plugin_name)
            impl.function(register=self._register_into(found, provider))
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

    def _unknown_message(self, name: str, found: dict[str, Registration[T]]) -> str:
        available = ", ".join(
            f"{reg.name} ({reg.provider.distribution})" for reg in sorted(found.values(), key=lambda r: r.name)
        ) or "none"
        hint = difflib.get_close_matches(name, list(found), n=1)
        did_you_mean = f", did you mean {hint[0]!r}?" if hint else ""
        return (
            f"unknown {self.kind} {name!r} (from {self.env_var}){did_you_mean}; "
            f"available: {available}"
        )
