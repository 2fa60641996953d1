"""A bounded cache of locked blocks, so that pinning a size again costs a copy, not page faults.

When the last view of a native block dies, the block (still locked, its pages resident) goes
here instead of being unlocked and freed; a later pin of the same page-rounded size takes it
back. The cache is bounded in bytes by ZERO_PIN_CACHE_BYTES (default 1 GiB; 0 turns it off):
the oldest blocks go first. Cached blocks stay counted as pinned (they are locked) and are
reported as "cached". `empty_cache()` unlocks and frees them all, as does interpreter exit,
and a new lock that would go over RLIMIT_MEMLOCK releases them first.
"""
from __future__ import annotations

import atexit
import os
import re
import weakref
from collections import OrderedDict
from itertools import count
from typing import Any, Callable, Generic, Protocol, TypeVar

from ._accounting import ACCOUNT
from ._errors import PinError
from ._guard import GuardedLock
from ._units import GiB, format_bytes

ENV_VAR = "ZERO_PIN_CACHE_BYTES"
DEFAULT_LIMIT = 1 * GiB
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_parsed: tuple[str | None, int] = (None, DEFAULT_LIMIT)


def cache_limit() -> int:
    """ZERO_PIN_CACHE_BYTES in bytes (default 1 GiB, 0: no cache). Plain bytes or K, M, G, T (binary units)."""
    global _parsed
    raw = os.environ.get(ENV_VAR)
    if raw == _parsed[0]:
        return _parsed[1]
    limit = DEFAULT_LIMIT
    if raw is not None and raw.strip():
        match = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)(?:i?b)?\s*", raw, re.IGNORECASE)
        if match is None:
            raise PinError(f"{ENV_VAR} must be a size in bytes such as 1073741824, 512M or 2GiB "
                           f"(0 turns the pin cache off); got {raw!r}")
        limit = int(match.group(1)) * _UNITS[match.group(2).lower()]
    _parsed = (raw, limit)
    return limit


class Block(Protocol):
    @property
    def nbytes(self) -> int: ...

    @property
    def locked(self) -> bool: ...


B = TypeVar("B", bound=Block)


class BlockCache(Generic[B]):
    """Locked blocks kept for reuse, by size, oldest evicted first; thread safe.

    Accounted to the backend named by `account_as()`: bytes move between in use and cached,
    and are uncounted when a block leaves the cache for good. Blocks to free are handed back
    to the caller, who drops them outside the lock (dropping one unlocks and frees it).
    """

    def __init__(self, account_as: Callable[[], str]) -> None:
        self._account_as = account_as
        self._lock = GuardedLock()
        self._limit = DEFAULT_LIMIT
        self._bytes = 0
        self._closed = False
        self._keys = count()
        self._oldest_first: OrderedDict[int, B] = OrderedDict()
        self._by_size: dict[int, OrderedDict[int, B]] = {}
        _CACHES.add(self)

    @property
    def limit(self) -> int:
        return self._limit

    def nbytes(self) -> int:
        return self._bytes

    def blocks(self) -> list[B]:
        """The cached blocks, oldest first."""
        with self._lock:
            return list(self._oldest_first.values())

    def set_limit(self, limit: int) -> list[B]:
        """Bound the cache to `limit` bytes; returns the blocks evicted to fit."""
        with self._lock:
            self._limit = limit
            return self._evict(self._bytes - limit)

    def take(self, size: int) -> B | None:
        """A cached block of exactly `size` bytes (the newest), now in use again; None if there is none."""
        with self._lock:
            bucket = self._by_size.get(size)
            if not bucket:
                return None
            key, block = bucket.popitem()
            if not bucket:
                del self._by_size[size]
            del self._oldest_first[key]
            self._bytes -= size
            ACCOUNT.from_cache(self._account_as(), size)
            return block

    def put(self, block: B) -> list[B]:
        """Keep a locked block whose last view died; returns the blocks to free (it, or older ones evicted)."""
        size = block.nbytes
        with self._lock:
            if self._closed or not block.locked or size > self._limit:
                ACCOUNT.remove(self._account_as(), size)
                return [block]
            evicted = self._evict(self._bytes + size - self._limit)
            key = next(self._keys)
            self._by_size.setdefault(size, OrderedDict())[key] = block
            self._oldest_first[key] = block
            self._bytes += size
            ACCOUNT.to_cache(self._account_as(), size)
            return evicted

    def release(self, nbytes: int | None = None) -> int:
        """Unlock and free the oldest blocks, at least `nbytes` of them if there are (all when None).

        Returns the bytes freed; they are no longer locked when this returns.
        """
        with self._lock:
            evicted = self._evict(self._bytes if nbytes is None else nbytes)
        freed = sum(block.nbytes for block in evicted)
        evicted.clear()  # the last references: each block unlocks and frees its memory now
        return freed

    def close(self) -> int:
        """Free everything and cache nothing more (interpreter exit)."""
        with self._lock:
            self._closed = True
        return self.release()

    def forget_after_fork(self) -> None:
        """In a forked child: mlock is not inherited, so the copies of the cached blocks are not locked."""
        self._lock = GuardedLock()  # another thread of the parent may have held it at the fork
        blocks, self._bytes = list(self._oldest_first.values()), 0
        self._oldest_first.clear()
        self._by_size.clear()
        for block in blocks:
            ACCOUNT.remove(self._account_as(), block.nbytes, cached=True)

    def _evict(self, nbytes: int) -> list[B]:
        """Under the lock: take the oldest blocks out until at least `nbytes` are out (or none is left)."""
        evicted: list[B] = []
        while nbytes > 0 and self._oldest_first:
            key, block = self._oldest_first.popitem(last=False)
            size = block.nbytes
            bucket = self._by_size[size]
            del bucket[key]
            if not bucket:
                del self._by_size[size]
            self._bytes -= size
            nbytes -= size
            ACCOUNT.remove(self._account_as(), size, cached=True)
            evicted.append(block)
        return evicted

    def __repr__(self) -> str:
        return f"BlockCache({format_bytes(self._bytes)} of {format_bytes(self._limit)} in {len(self._oldest_first)} blocks)"


_CACHES: weakref.WeakSet[BlockCache[Any]] = weakref.WeakSet()
_forks = 0  # how many forks this process is down from the one that imported zero-pin


def fork_generation() -> int:
    """Changes in a forked child, whose copies of blocks locked before the fork are not locked."""
    return _forks


def empty_cache() -> int:
    """Unlock and free every block zero-pin keeps for reuse; returns the bytes released.

    Like torch.cuda.empty_cache(): the memory goes back to the system, and the next pins of
    those sizes fault fresh pages in again.
    """
    return sum(cache.release() for cache in list(_CACHES))


@atexit.register
def _close_at_exit() -> None:
    for cache in list(_CACHES):
        cache.close()


def _after_fork_in_child() -> None:
    global _forks
    _forks += 1
    for cache in list(_CACHES):
        cache.forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
