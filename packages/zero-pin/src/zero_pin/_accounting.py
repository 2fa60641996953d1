"""Process-wide pinned host memory, current and peak, per backend.

Bytes are counted when pages are actually locked and uncounted when the lock goes
(unpin, or the memory's last view dying). A backend that keeps a cache of locked blocks for
reuse (the native backend) goes on counting them, since they stay locked, and reports them
as "cached" as well. An INFO line marks each time the total first reaches 32 GiB, then 64,
128 and so on: pinned memory cannot be swapped, and a host out-of-memory error often
surfaces far from the code that pinned it.
"""
from __future__ import annotations

import functools
import logging
import weakref
from typing import TYPE_CHECKING, TypedDict

from ._guard import GuardedLock, defer
from ._units import GiB, format_bytes

if TYPE_CHECKING:
    import torch

log = logging.getLogger("zero_pin")
FIRST_MILESTONE = 32 * GiB


class _CurrentAndPeak(TypedDict):
    current: int
    peak: int


class PinnedBytes(_CurrentAndPeak, total=False):
    """Bytes pinned now (cached ones included) and at peak. `cached`, present for a backend
    that keeps a cache (and in the total once any does), is the part of `current` that is
    locked but held for reuse, not in use."""

    cached: int


class PinnedMemoryStats(TypedDict):
    """What pinned_memory_stats() returns: bytes pinned in all, and per backend."""

    total: PinnedBytes
    backends: dict[str, PinnedBytes]


class PinnedMemoryAccount:
    def __init__(self) -> None:
        self._lock = GuardedLock()
        self._current: dict[str, int] = {}
        self._cached: dict[str, int] = {}  # only backends that keep a cache have an entry
        self._peak: dict[str, int] = {}
        self._total_peak = 0
        self._next_milestone = FIRST_MILESTONE

    def add(self, backend: str, nbytes: int) -> None:
        crossed = []
        with self._lock:
            current = self._current[backend] = self._current.get(backend, 0) + nbytes
            self._peak[backend] = max(self._peak.get(backend, 0), current)
            total = sum(self._current.values())
            self._total_peak = max(self._total_peak, total)
            while total >= self._next_milestone:
                crossed.append(self._next_milestone)
                self._next_milestone *= 2
            described = _describe(self._stats()) if crossed else ""
        for milestone in crossed:
            log.info("pinned host memory reached %s: %s", format_bytes(milestone), described)

    def remove(self, backend: str, nbytes: int, cached: bool = False) -> None:
        """Uncount bytes no longer locked; `cached` when they leave the backend's cache."""
        with self._lock:
            self._current[backend] -= nbytes
            if cached:
                self._cached[backend] -= nbytes

    def keeps_cache(self, backend: str) -> None:
        """Declare that `backend` keeps a cache: its stats get a "cached" figure from now on."""
        with self._lock:
            self._cached.setdefault(backend, 0)

    def to_cache(self, backend: str, nbytes: int) -> None:
        """Locked bytes moved from use into the backend's cache: still counted, now as cached."""
        with self._lock:
            self._cached[backend] = self._cached.get(backend, 0) + nbytes

    def from_cache(self, backend: str, nbytes: int) -> None:
        """Cached bytes handed out again: still counted, in use again."""
        with self._lock:
            self._cached[backend] -= nbytes

    def cached(self) -> int:
        """Bytes held in every backend's cache: locked, but released before a new lock would fail."""
        with self._lock:
            return sum(self._cached.values())

    def stats(self) -> PinnedMemoryStats:
        with self._lock:
            return self._stats()

    def _stats(self) -> PinnedMemoryStats:
        total: PinnedBytes = {"current": sum(self._current.values()), "peak": self._total_peak}
        if self._cached:
            total["cached"] = sum(self._cached.values())
        backends: dict[str, PinnedBytes] = {}
        for name in sorted(self._current):
            figures: PinnedBytes = {"current": self._current[name], "peak": self._peak[name]}
            if name in self._cached:
                figures["cached"] = self._cached[name]
            backends[name] = figures
        return {"total": total, "backends": backends}

    def summary(self, tag: str = "") -> str:
        line = f"[pinned-memory {tag}] " if tag else "[pinned-memory] "
        line += _describe(self.stats())
        log.info(line)
        return line


def _cached_text(figures: PinnedBytes) -> str:
    cached = figures.get("cached", 0)
    return f"{format_bytes(cached)} cached, " if cached else ""


def _describe(stats: PinnedMemoryStats) -> str:
    total = stats["total"]
    per_backend = ", ".join(
        f"{name} {format_bytes(b['current'])} ({_cached_text(b)}peak {format_bytes(b['peak'])})"
        for name, b in stats["backends"].items()
    )
    cached = total.get("cached", 0)
    return (f"{format_bytes(total['current'])} pinned now"
            + (f" ({format_bytes(cached)} of it cached for reuse)" if cached else "")
            + f", peak {format_bytes(total['peak'])}"
            + (f": {per_backend}" if per_backend else ""))


ACCOUNT = PinnedMemoryAccount()


def pinned_memory_stats() -> PinnedMemoryStats:
    """{"total": {"current", "peak"}, "backends": {name: {"current", "peak"}}}, in bytes.

    A backend that keeps a cache of locked blocks (native) also has "cached": the part of
    "current" held for reuse; the total has it too once any backend keeps a cache.
    """
    return ACCOUNT.stats()


def pinned_memory_summary(tag: str = "") -> str:
    """Log (INFO) and return one line with the pinned bytes now and at peak, per backend."""
    return ACCOUNT.summary(tag)


def track_pinned_storage(backend: str, tensor: torch.Tensor) -> None:
    """Count the tensor's storage as pinned by `backend` until the storage dies.

    For backends whose locked memory lives exactly as long as its storage (torch's pin_memory).
    The storage, not the tensor, is watched: views and autograd keep it alive without the tensor.
    """
    storage = tensor.untyped_storage()
    nbytes = storage.nbytes()
    ACCOUNT.add(backend, nbytes)
    # The storage may die inside a collection while this thread holds the account's lock: defer.
    weakref.finalize(storage, defer, functools.partial(ACCOUNT.remove, backend, nbytes))
