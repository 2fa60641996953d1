"""Address ranges of the native backend's live allocations, so that any view is recognised."""
from __future__ import annotations

import bisect
from typing import Generic, TypeVar

from ._guard import GuardedLock

T = TypeVar("T")


class RangeManager(Generic[T]):
    """Non-overlapping [start, end) byte ranges, each with an owner; thread safe.

    Lookups are a binary search, so `is_pinned` stays cheap with many allocations.
    """

    def __init__(self) -> None:
        self._lock = GuardedLock()  # the native backend's release (from a weakref callback) takes it
        self._starts: list[int] = []
        self._entries: dict[int, tuple[int, T]] = {}

    def add(self, start: int, end: int, owner: T) -> None:
        with self._lock:
            bisect.insort(self._starts, start)
            self._entries[start] = (end, owner)

    def find(self, start: int, end: int) -> tuple[int, T] | None:
        """The (range start, owner) of the range holding all of [start, end), if any."""
        with self._lock:
            index = bisect.bisect_right(self._starts, start) - 1
            if index < 0:
                return None
            range_start = self._starts[index]
            range_end, owner = self._entries[range_start]
        return (range_start, owner) if end <= range_end else None

    def remove(self, start: int, owner: T) -> bool:
        """Drop the range at `start` if `owner` still holds it (its address may have been reused)."""
        with self._lock:
            entry = self._entries.get(start)
            if entry is None or entry[1] is not owner:
                return False
            del self._entries[start]
            del self._starts[bisect.bisect_left(self._starts, start)]
            return True
