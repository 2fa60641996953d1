"""The pin-backend registry, selection by DS_PIN_MEMORY_BACKEND, and the calls routed to it."""
from __future__ import annotations

from typing import TYPE_CHECKING

from zero_plugins import NamedRegistry, Status

from . import _hookspecs
from ._activity import COUNTER
from ._backend import PinBackend

if TYPE_CHECKING:
    import torch

ENV_VAR = "DS_PIN_MEMORY_BACKEND"
DEFAULT = "torch"

REGISTRY: NamedRegistry[PinBackend] = NamedRegistry(
    kind="pin backend", base=PinBackend, hookspecs=_hookspecs, hook_name="zero_register_pin_backends",
    env_var=ENV_VAR, default=DEFAULT)


def selected_name() -> str:
    return REGISTRY.requested_name() or DEFAULT


def get_backend(name: str | None = None) -> PinBackend:
    """The backend registered as `name` (default: DS_PIN_MEMORY_BACKEND, else torch), one per process.

    Raises PluginError for an unknown name, NativeBuildError if `native` cannot build.
    """
    return REGISTRY.shared_instance(name or selected_name(), _make_backend)


def _make_backend(name: str, cls: type[PinBackend]) -> PinBackend:
    backend = cls()
    backend.name = name
    return backend


def available_backends() -> dict[str, type[PinBackend]]:
    """Every registered backend class by name; ask each with `.available()`."""
    return {name: registration.cls for name, registration in sorted(REGISTRY.registrations().items())}


def backend_statuses() -> list[Status]:
    """One row per registered backend: name, available, reason, distribution, selected. Builds nothing."""
    return REGISTRY.statuses()


def pin_memory(tensor: torch.Tensor, make_copy: bool = True, match_shape: bool = True) -> torch.Tensor:
    """Pin with the selected backend: a copy of `tensor` (make_copy), shaped like it (match_shape) or flat.

    Each call is a new pinned buffer (the native backend may take a cached one: then a copy into it); for
    buffers that live across steps, allocate them born pinned with `empty_pinned`, or from a `PinnedPool`."""
    pinned = get_backend().pin_memory(tensor, make_copy=make_copy, match_shape=match_shape)
    COUNTER.record(tensor.numel() * tensor.element_size(), copy=make_copy)
    return pinned


def empty_pinned(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """A flat, uninitialised tensor of `numel` elements, born pinned by the selected backend (no copy).

    Without an accelerator the torch backend pins nothing: the tensor is plain host memory, as with pin_memory."""
    if numel < 0:
        raise ValueError(f"empty_pinned: numel must be >= 0 (got {numel})")
    pinned = get_backend().empty(numel, dtype)
    COUNTER.record(pinned.numel() * pinned.element_size(), copy=False)
    return pinned


def is_pinned(tensor: torch.Tensor) -> bool:
    """True when the selected backend sees the tensor's memory as pinned (views and slices included)."""
    return get_backend().is_pinned(tensor)


def unpin_memory(tensor: torch.Tensor) -> bool:
    """Release the lock on the tensor's memory now; the memory itself lives while referenced."""
    return get_backend().unpin_memory(tensor)
