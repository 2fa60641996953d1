"""How often host memory was newly allocated for pinning, or copied into pinned memory: the figure that
says whether a training loop pins on every step (it should not: buffers are born pinned, and reused).

Counted at zero-pin's entry points (`empty_pinned`, `pin_memory`), whatever the backend does with the
request, so a CPU-only machine, where the torch backend locks nothing, counts the same requests a GPU
machine would. Process-wide and thread safe; read it twice and subtract for an interval.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class PinActivity:
    """Requests since the process started: `allocations` new host buffers made to be pinned (born pinned,
    or a fresh pinned copy's buffer) and their bytes; `copies` of those that also copied data in."""

    allocations: int = 0
    allocated_bytes: int = 0
    copies: int = 0
    copied_bytes: int = 0

    def __sub__(self, earlier: PinActivity) -> PinActivity:
        return PinActivity(self.allocations - earlier.allocations, self.allocated_bytes - earlier.allocated_bytes,
                           self.copies - earlier.copies, self.copied_bytes - earlier.copied_bytes)

    def as_dict(self) -> dict[str, int]:
        return {"allocations": self.allocations, "allocated_bytes": self.allocated_bytes,
                "copies": self.copies, "copied_bytes": self.copied_bytes}


class _Counter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now = PinActivity()

    def record(self, nbytes: int, *, copy: bool) -> None:
        with self._lock:
            now = self._now
            self._now = PinActivity(now.allocations + 1, now.allocated_bytes + nbytes,
                                    now.copies + copy, now.copied_bytes + (nbytes if copy else 0))

    def read(self) -> PinActivity:
        with self._lock:
            return self._now


COUNTER = _Counter()


def pin_activity() -> PinActivity:
    """Pinning requests since the process started (see PinActivity); subtract two readings for an interval."""
    return COUNTER.read()
