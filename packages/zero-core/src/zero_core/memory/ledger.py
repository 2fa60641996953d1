"""The memory ledger: bytes held by the engine, by category, current and peak, per device.

Engine-owned buffers are registered under a category when they are allocated. Each
storage is counted once (views share their base's storage) and uncounted when a weak
reference says it died, so the figures follow the real lifetime of the memory, not the
engine's intentions. With tracking on, a StorageTracker sees every other storage made
inside the engine's forward, backward and step, and the ledger files it under
`activations` (made in forward or backward) or `other` (made elsewhere, e.g. the
optimizer's temporaries). docs/ledger.md describes each category.
"""
from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .report import CommCount, MemoryReport
from .tracker import StorageTracker

CATEGORIES: tuple[str, ...] = (
    "param.partition",
    "param.gathered",
    "param.gathered.held",
    "param.persistent",
    "module.buffers",
    "grad.full",
    "grad.partition",
    "grad.bucket",
    "optim.master",
    "optim.grad",
    "optim.state",
    "pinned.host",
    "swap.buffer",
    "activations",
    "other",
)
# Storages the engine did not allocate itself, seen only while tracking.
UNOWNED = frozenset({"activations", "other"})
# Phases whose new anonymous storages are activations (or their gradients).
_ACTIVATION_PHASES = frozenset({"forward", "backward"})


@dataclass
class _Entry:
    ref: weakref.ref
    category: str
    device: str
    nbytes: int


class MemoryLedger:
    """Current and peak bytes per (device, category), plus bytes sent through collectives."""

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self._current: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._peak: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._total: dict[str, int] = defaultdict(int)
        self._total_peak: dict[str, int] = defaultdict(int)
        self._comm: dict[str, CommCount] = {}
        self._tracker: StorageTracker | None = None
        self._label: str | None = None
        self._phase = "idle"

    # --- engine-owned buffers ---
    def register(self, tensor: torch.Tensor, category: str) -> torch.Tensor:
        """Count `tensor`'s storage under `category` until it dies; a storage already counted is left as is.

        A storage first seen by the tracker (as activations/other) moves to `category`.
        """
        _check_category(category)
        if tensor.device.type == "meta":
            return tensor
        storage = tensor.untyped_storage()
        entry = self._entries.get(storage._cdata)
        if entry is not None and entry.ref() is storage:
            if entry.category in UNOWNED and category not in UNOWNED:
                self._move(entry, category)
            return tensor
        self._add(storage, tensor.device.type, category)
        return tensor

    def new(self, category: str, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        """Run `make()` (one allocation) and register its result; while tracking, its storage is labelled at birth."""
        previous, self._label = self._label, category
        try:
            tensor = make()
        finally:
            self._label = previous
        return self.register(tensor, category)

    def relabel(self, storage: torch.UntypedStorage, category: str) -> None:
        """Move a counted storage to another category (stage 3 files gathered weights found still alive as held)."""
        _check_category(category)
        entry = self._entries.get(storage._cdata)
        if entry is not None and entry.ref() is storage:
            self._move(entry, category)

    def category_of(self, tensor: torch.Tensor) -> str | None:
        storage = tensor.untyped_storage()
        entry = self._entries.get(storage._cdata)
        return entry.category if entry is not None and entry.ref() is storage else None

    # --- communication ---
    def count_comm(self, op: str, payload_bytes: int, sent_bytes: int) -> None:
        """One collective: `payload_bytes` is the tensor handed to it, `sent_bytes` what this rank sends."""
        count = self._comm.setdefault(op, CommCount())
        count.calls += 1
        count.payload_bytes += payload_bytes
        count.sent_bytes += sent_bytes

    def comm_sent_bytes(self) -> int:
        return sum(count.sent_bytes for count in self._comm.values())

    # --- tracking anonymous storages ---
    @property
    def tracking(self) -> bool:
        return self._tracker is not None

    def set_tracking(self, enabled: bool) -> None:
        """Attribute storages the engine does not own inside its phases (costs a dispatch hook per op)."""
        if enabled and self._tracker is None:
            self._tracker = StorageTracker()
            self._tracker.add_listener(self._on_new_storage)
        elif not enabled:
            self._tracker = None

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Mark a phase of training ("forward", "backward", "step"); tracks storages inside it when tracking."""
        previous, self._phase = self._phase, name
        tracker = self._tracker
        try:
            if tracker is None or previous != "idle":
                yield
            else:
                with tracker:
                    yield
        finally:
            self._phase = previous

    # --- figures ---
    def current(self, category: str, device: str = "cpu") -> int:
        return self._current[device][category]

    def peak(self, category: str, device: str = "cpu") -> int:
        return self._peak[device][category]

    def total(self, device: str = "cpu") -> int:
        return self._total[device]

    def total_peak(self, device: str = "cpu") -> int:
        return self._total_peak[device]

    def reset_peaks(self) -> None:
        for device, categories in self._current.items():
            for category, value in categories.items():
                self._peak[device][category] = value
            self._total_peak[device] = self._total[device]

    def report(self, pinned: dict | None = None) -> MemoryReport:
        memory = {}
        for device in sorted(self._current):
            rows = {
                category: {"current": self._current[device][category], "peak": self._peak[device][category]}
                for category in CATEGORIES
                if self._peak[device][category] > 0
            }
            rows["total"] = {"current": self._total[device], "peak": self._total_peak[device]}
            memory[device] = rows
        comm = {op: count.as_dict() for op, count in sorted(self._comm.items())}
        return MemoryReport(memory, comm=comm, pinned=pinned, tracked=self.tracking)

    # --- bookkeeping ---
    def _on_new_storage(self, storage: torch.UntypedStorage, device: str) -> None:
        entry = self._entries.get(storage._cdata)
        if entry is not None and entry.ref() is storage:
            return
        label = self._label or ("activations" if self._phase in _ACTIVATION_PHASES else "other")
        self._add(storage, device, label)

    def _add(self, storage: torch.UntypedStorage, device: str, category: str) -> None:
        key = storage._cdata
        nbytes = storage.nbytes()
        ref = weakref.ref(storage, lambda dead, key=key: self._on_free(key, dead))
        self._entries[key] = _Entry(ref, category, device, nbytes)
        self._change(device, category, nbytes)
        self._total[device] += nbytes
        self._total_peak[device] = max(self._total_peak[device], self._total[device])

    def _move(self, entry: _Entry, category: str) -> None:
        self._change(entry.device, entry.category, -entry.nbytes)
        entry.category = category
        self._change(entry.device, category, entry.nbytes)

    def _on_free(self, key: int, dead: weakref.ref) -> None:
        entry = self._entries.get(key)
        if entry is None or entry.ref is not dead:
            return
        del self._entries[key]
        self._change(entry.device, entry.category, -entry.nbytes)
        self._total[entry.device] -= entry.nbytes

    def _change(self, device: str, category: str, delta: int) -> None:
        current = self._current[device]
        current[category] += delta
        peak = self._peak[device]
        peak[category] = max(peak[category], current[category])


def _check_category(category: str) -> None:
    if category not in CATEGORIES:
        raise ValueError(f"unknown ledger category {category!r}; known: {', '.join(CATEGORIES)}")
