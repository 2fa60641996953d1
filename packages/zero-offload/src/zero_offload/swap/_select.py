"""The swap-backend registry, selection by ZERO_SWAP_BACKEND, and backend creation."""
from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from zero_plugins import NamedRegistry, Status

from . import _hookspecs
from ._backend import SwapBackend
from ._errors import SwapError

if TYPE_CHECKING:  # the config (pydantic) is imported by callers; listing commands must stay light
    from zero_plugins.ds_config import AioConfig

ENV_VAR = "ZERO_SWAP_BACKEND"
DEFAULT = "threads"

REGISTRY: NamedRegistry[SwapBackend] = NamedRegistry(
    kind="swap backend", base=SwapBackend, hookspecs=_hookspecs, hook_name="zero_register_swap_backends",
    env_var=ENV_VAR, default=DEFAULT)


class BackendListing(TypedDict):
    """backend_listing(): what `zero swap check` and `zero report` show of the backends."""

    selected: str
    backends: list[Status]


def selected_name() -> str:
    """ZERO_SWAP_BACKEND, or `threads` when it is unset."""
    return REGISTRY.requested_name() or DEFAULT


def backend_statuses() -> list[Status]:
    """One row per registered backend: name, available (and why, or why not), distribution, selected."""
    return REGISTRY.statuses()


def backend_listing() -> BackendListing:
    """The selected name and every backend's status; an unknown ZERO_SWAP_BACKEND is a PluginError
    listing the installed backends (no row would be marked selected, which would hide the mistake)."""
    selected = selected_name()
    REGISTRY.get(selected)
    return {"selected": selected, "backends": backend_statuses()}


def get_swap_backend(aio: AioConfig | None = None, *, name: str | None = None,
                     buffered: bool | None = None) -> SwapBackend:
    """A new backend `name` (default: ZERO_SWAP_BACKEND, else `threads`) with the `aio` settings.

    An unknown name is a PluginError listing the registered backends; a registered one that
    cannot run here is a SwapError giving its reason and the backends that can. Never falls back.
    `buffered=None` reads ZERO_SWAP_BUFFERED. Close the backend (or use `with`) when done.
    """
    name = name or selected_name()
    cls = REGISTRY.get(name).cls
    available, reason = REGISTRY.availability(cls)
    if not available:
        raise SwapError(f"swap backend {name!r} (from {ENV_VAR}) is not available here: {reason}; "
                        f"available: {REGISTRY.usable_listing()}")
    backend = cls(aio, buffered=buffered)
    backend.name = name
    return backend

