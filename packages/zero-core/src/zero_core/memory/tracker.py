"""A storage tracker: exact bytes of tensor storages allocated inside a region.

Like torch.distributed._tools.mem_tracker, it is a TorchDispatchMode that sees every
op's outputs, counts each new storage once (views share their base's storage), and
subtracts it when a weak-reference callback says the storage died. It works for CPU
tensors, where no allocator statistics exist. Storages only C++ holds are still seen,
because they were created by an op under the mode; storages resized in place are not
(the allocator events of torch.profiler see those, see DESIGN.md).
"""
from __future__ import annotations

import weakref
from collections import defaultdict
from typing import Any, Callable, Protocol

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .active import pop_tracker, push_tracker
from .fake import counts_fake_tensors, is_fake

# Called with (storage nbytes, device string) when a new storage appears; the ledger
# uses it to label storages it does not own as activations or other.
AllocationListener = Callable[[torch.UntypedStorage, str], None]


class OpProbe(Protocol):
    """Called around each op the tracker sees (the ledger measures kernels' transients at the allocator)."""

    def before(self) -> None: ...

    def after(self) -> None: ...


class StorageTracker(TorchDispatchMode):
    """Use as a context manager; figures are per device type ("cpu", "cuda", ...)."""

    def __init__(self, *, block_bytes: Callable[[int, str], int] | None = None) -> None:
        """`block_bytes(nbytes, device type)`: what the device's allocator counts for a storage of `nbytes`
        (a dry run's CUDA blocks, zero_core.dryrun); by default the storage's own bytes."""
        # torch leaves TorchDispatchMode's __init__/__enter__/__exit__ unannotated, and mypy's
        # untyped_calls_exclude (mypy.ini) does not cover calls made through super().
        super().__init__()  # type: ignore[no-untyped-call]
        self._current: dict[str, int] = defaultdict(int)
        self._peak: dict[str, int] = defaultdict(int)
        # storage key -> (the storage, weakly; the device type of its tensors: a fake storage's own is "meta")
        self._seen: dict[int, tuple[weakref.ref[torch.UntypedStorage], str]] = {}
        self._block_bytes = block_bytes
        self._listeners: list[AllocationListener] = []
        self._probe: OpProbe | None = None

    # --- figures ---
    def current_bytes(self, device: str) -> int:
        return self._current[device]

    def peak_bytes(self, device: str) -> int:
        return self._peak[device]

    def reset_peak(self) -> None:
        for device, value in self._current.items():
            self._peak[device] = value

    def add_listener(self, listener: AllocationListener) -> None:
        self._listeners.append(listener)

    def set_probe(self, probe: OpProbe | None) -> None:
        """Run `probe.before()` and `probe.after()` around every op but collectives (memory/ruler.py, OpTransients)."""
        self._probe = probe

    # --- tracking ---
    def track(self, tensor: torch.Tensor) -> None:
        """Count a tensor's storage if it is new (also usable outside the mode, e.g. for inputs)."""
        if tensor.device.type == "meta" or (is_fake(tensor) and not counts_fake_tensors()):
            return
        storage = tensor.untyped_storage()
        if self.device_of(storage) is not None:
            return
        key = storage._cdata
        device = tensor.device.type
        nbytes = storage.nbytes() if self._block_bytes is None else self._block_bytes(storage.nbytes(), device)
        self._seen[key] = (weakref.ref(storage, self._on_free(key, device, nbytes)), device)
        self._current[device] += nbytes
        self._peak[device] = max(self._peak[device], self._current[device])
        for listener in self._listeners:
            listener(storage, device)

    def device_of(self, storage: torch.UntypedStorage) -> str | None:
        """The device type of the tensors on this storage, if it is counted (alive and seen)."""
        known = self._seen.get(storage._cdata)
        return known[1] if known is not None and known[0]() is storage else None

    def _on_free(self, key: int, device: str, nbytes: int) -> Callable[[Any], None]:
        def release(_ref: Any) -> None:
            if self._seen.get(key, (None, ""))[0] is _ref:
                del self._seen[key]
            self._current[device] -= nbytes

        return release

    def __torch_dispatch__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        probe = self._probe if self._probe is not None and getattr(func, "namespace", "") != "c10d" else None
        if probe is not None:
            probe.before()
        outputs = func(*args, **(kwargs or {}))
        flat, _ = tree_flatten(outputs)
        for item in flat:
            if isinstance(item, torch.Tensor):
                self.track(item)
        if probe is not None:
            probe.after()
        return outputs

    def __enter__(self) -> "StorageTracker":
        push_tracker(self)
        super().__enter__()  # type: ignore[no-untyped-call]  # unannotated in torch (see __init__); returns self
        return self

    def __exit__(self, *exc: Any) -> None:
        pop_tracker(self)  # first: it refuses an out-of-order exit before torch's mode stack changes
        super().__exit__(*exc)  # type: ignore[no-untyped-call]  # unannotated in torch (see __init__)

