"""Process-wide pinned host memory, current and peak, per backend.

Bytes are counted when pages are actually locked and uncounted when the lock goes
(unpin, or the memory's last view dying). An INFO line marks each time the total
first reaches 32 GiB, then 64, 128 and so on: pinned memory cannot be swapped, and a
host out-of-memory error often surfaces far from the code that pinned it.
"""
from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING, TypedDict

from ._units import GiB, format_bytes

if TYPE_CHECKING:
    import torch

log = logging.getLogger("zero_pin")
FIRST_MILESTONE = 32 * GiB


class PinnedBytes(TypedDict):
    current: int
    peak: int


class PinnedMemoryStats(TypedDict):
    """What pinned_memory_stats() returns: bytes pinned in all, and per backend."""

    total: PinnedBytes
    backends: dict[str, PinnedBytes]


class PinnedMemoryAccount:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: dict[str, int] = {}
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

    def remove(self, backend: str, nbytes: int) -> None:
        with self._lock:
            self._current[backend] -= nbytes

    def stats(self) -> PinnedMemoryStats:
        with self._lock:
            return self._stats()

    def _stats(self) -> PinnedMemoryStats:
        return {
            "total": {"current": sum(self._current.values()), "peak": self._total_peak},
            "backends": {name: {"current": self._current[name], "peak": self._peak[name]}
                         for name in sorted(self._current)},
        }

    def summary(self, tag: str = "") -> str:
        line = f"[pinned-memory {tag}] " if tag else "[pinned-memory] "
        line += _describe(self.stats())
        log.info(line)
        return line


def _describe(stats: PinnedMemoryStats) -> str:
    total = stats["total"]
    per_backend = ", ".join(
        f"{name} {format_bytes(b['current'])} (peak {format_bytes(b['peak'])})"
        for name, b in stats["backends"].items()
    )
    return (f"{format_bytes(total['current'])} pinned now, peak {format_bytes(total['peak'])}"
            + (f": {per_backend}" if per_backend else ""))


ACCOUNT = PinnedMemoryAccount()


def pinned_memory_stats() -> PinnedMemoryStats:
    """{"total": {"current", "peak"}, "backends": {name: {"current", "peak"}}}, in bytes."""
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
    weakref.finalize(storage, ACCOUNT.remove, backend, nbytes)
