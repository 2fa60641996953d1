"""The storage tracker currently profiling this thread, if any (read by the CPU accelerator)."""
from __future__ import annotations

import threading
from typing import Protocol


class MemoryFigures(Protocol):
    def current_bytes(self, device: str) -> int: ...

    def peak_bytes(self, device: str) -> int: ...

    def reset_peak(self) -> None: ...


class _TrackerStack(threading.local):
    stack: list[MemoryFigures]  # set on first use in each thread


_local = _TrackerStack()


def _stack() -> list[MemoryFigures]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def active_tracker() -> MemoryFigures | None:
    stack = _stack()
    return stack[-1] if stack else None


def push_tracker(tracker: MemoryFigures) -> None:
    _stack().append(tracker)


def pop_tracker(tracker: MemoryFigures) -> None:
    stack = _stack()
    if not stack or stack[-1] is not tracker:
        raise RuntimeError("storage trackers must be exited in the reverse order they were entered")
    stack.pop()
