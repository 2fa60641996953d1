"""Locks that weakref callbacks can never deadlock on.

A pinned block goes back to the cache from a weakref callback, when its last view dies. That
can happen in any thread at almost any point: a `del`, or a garbage collection that runs
inside an allocation, possibly while this very thread holds one of zero-pin's locks. So such
callbacks only `defer` their work: it runs at once when the thread holds no GuardedLock, and
otherwise when the thread releases its last one. A thread that runs deferred work holds none
of these locks, so waiting for one cannot deadlock.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from types import TracebackType
from typing import Callable

log = logging.getLogger("zero_pin")



class _Held(threading.local):
    depth = 0  # how many GuardedLocks this thread holds


_held = _Held()
_deferred: deque[Callable[[], None]] = deque()


class GuardedLock:
    """A non-reentrant lock that counts, per thread, the GuardedLocks held (see module doc)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        self._lock.acquire()
        _held.depth += 1

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        _held.depth -= 1
        self._lock.release()
        if _deferred and not _held.depth:
            run_deferred()


def defer(work: Callable[[], None]) -> None:
    """Run `work` now if this thread holds no GuardedLock, else as soon as it releases the last one."""
    _deferred.append(work)
    if not _held.depth:
        run_deferred()


def run_deferred() -> None:
    while not _held.depth:
        try:
            work = _deferred.popleft()
        except IndexError:
            return
        try:
            work()
        except Exception:  # never let a release break the unrelated code that happened to run it
            log.exception("zero_pin: releasing a pinned block failed")
