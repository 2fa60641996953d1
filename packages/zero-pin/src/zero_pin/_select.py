"""The pin-backend registry, selection by DS_PIN_MEMORY_BACKEND, and the calls routed to it."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, TypedDict

from zero_plugins import NamedRegistry, get_plugin_manager

from . import _hookspecs
from ._backend import PinBackend

if TYPE_CHECKING:
    import torch

ENV_VAR = "DS_PIN_MEMORY_BACKEND"
DEFAULT = "torch"

REGISTRY: NamedRegistry[PinBackend] = NamedRegistry(
    kind="pin backend",
    hook_name="zero_register_pin_backends",
    hookspecs=_hookspecs,
    base=PinBackend,
    env_var=ENV_VAR,
)

_lock = threading.RLock()
# One instance per registered (name, class) for the whole process: the native backend's
# address ranges must be shared by every caller.
_instances: dict[tuple[str, type[PinBackend]], PinBackend] = {}
# Looking a name up calls every plugin's hook (~0.1 ms) and pin_memory / is_pinned run per
# tensor, so a resolved name is remembered until the set of registered plugins changes.
_resolved: dict[str, PinBackend] = {}
_resolved_for: list[tuple[str, object]] = []


class BackendStatus(TypedDict):
    """One row of backend_statuses()."""

    name: str
    available: bool
    reason: str
    distribution: str
    selected: bool


def selected_name() -> str:
    return REGISTRY.requested_name() or DEFAULT


def get_backend(name: str | None = None) -> PinBackend:
    """The backend registered as `name` (default: DS_PIN_MEMORY_BACKEND, else torch).

    Raises PluginError for an unknown name, NativeBuildError if `native` cannot build.
    """
    global _resolved_for
    name = name or selected_name()
    plugins = get_plugin_manager().list_name_plugin()
    with _lock:
        if plugins != _resolved_for:
            _resolved.clear()
            _resolved_for = plugins
        if name not in _resolved:
            cls = REGISTRY.get(name).cls
            if (name, cls) not in _instances:
                backend = cls()
                backend.name = name
                _instances[name, cls] = backend
            _resolved[name] = _instances[name, cls]
        return _resolved[name]


def available_backends() -> dict[str, type[PinBackend]]:
    """Every registered backend class by name; ask each with `.available()`."""
    return {name: registration.cls for name, registration in sorted(REGISTRY.registrations().items())}


def backend_statuses() -> list[BackendStatus]:
    """One row per registered backend: name, available, reason, distribution, selected. Builds nothing."""
    selected = selected_name()
    rows: list[BackendStatus] = []
    for name, registration in sorted(REGISTRY.registrations().items()):
        try:
            available, reason = registration.cls.available()
        except Exception as error:  # a plugin's broken check must not hide the other backends
            available, reason = False, f"available() raised {error!r}"
        rows.append({"name": name, "available": bool(available), "reason": reason,
                     "distribution": registration.provider.distribution, "selected": name == selected})
    return rows


def pin_memory(tensor: torch.Tensor, make_copy: bool = True, match_shape: bool = True) -> torch.Tensor:
    """Pin with the selected backend: a copy of `tensor` (make_copy), shaped like it (match_shape) or flat."""
    return get_backend().pin_memory(tensor, make_copy=make_copy, match_shape=match_shape)


def is_pinned(tensor: torch.Tensor) -> bool:
    """True when the selected backend sees the tensor's memory as pinned (views and slices included)."""
    return get_backend().is_pinned(tensor)


def unpin_memory(tensor: torch.Tensor) -> bool:
    """Release the lock on the tensor's memory now; the memory itself lives while referenced."""
    return get_backend().unpin_memory(tensor)
