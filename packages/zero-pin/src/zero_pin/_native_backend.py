"""The `native` backend: posix_memalign + mlock through a small C++ op (see _native_build).

Unlike the design it follows, unpin_memory never frees: it only releases the lock, and
the memory goes when its last view dies. Reading a tensor after unpinning it is safe.
A block whose last view dies while still locked goes to a bounded cache (see _cache), and
the next pin of its size takes it back: a copy into resident pages instead of page faults.
"""
from __future__ import annotations

import functools
import weakref
from typing import Any

import torch

from ._accounting import ACCOUNT
from ._backend import PinBackend
from ._cache import BlockCache, cache_limit, fork_generation
from ._errors import MemlockLimitError
from ._guard import defer
from ._hugepages import huge_page_alignment
from ._memlock import FIX, check_memlock, memlock_overage
from ._native_build import load_op, native_build_state
from ._ranges import RangeManager
from ._tensors import check_pinnable, host_extent
from ._units import format_bytes


class _Pin:
    """One pin of a block: the memoryview that every tensor of this pin holds, and the block.

    A block lives on across pins (through the cache); a _Pin lasts until its view dies.
    """

    __slots__ = ("block", "generation", "start", "view")

    def __init__(self, block: Any, view: memoryview) -> None:
        self.block = block
        self.start: int = block.address
        self.view = weakref.ref(view)
        self.generation = fork_generation()


class NativeBackend(PinBackend):
    @classmethod
    def available(cls) -> tuple[bool, str]:
        state = native_build_state()
        if state["state"] == "cannot build":
            return False, state["detail"]
        return True, f"op {state['state']}: {state['detail']}"

    def __init__(self) -> None:
        self._op = load_op()
        # Every live pin, by the address range of its block (the instance serves the whole process).
        self._ranges: RangeManager[_Pin] = RangeManager()
        self.cache: BlockCache[Any] = BlockCache(lambda: self.name)
        self._declared = False

    def pin_memory(self, tensor: torch.Tensor, make_copy: bool = True, match_shape: bool = True) -> torch.Tensor:
        check_pinnable(tensor, make_copy)
        shape = tuple(tensor.shape) if match_shape else (tensor.numel(),)
        pinned = self.empty(tensor.numel(), tensor.dtype).view(shape)
        if make_copy:
            with torch.no_grad():  # a pinned buffer is storage, not a step of the autograd graph
                pinned.copy_(tensor.reshape(shape))
        return pinned

    def empty(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        view = memoryview(self._lock_block(nbytes))
        pin = _Pin(view.obj, view)
        self._ranges.add(pin.start, pin.start + pin.block.nbytes, pin)
        # The storage holds `view`, `view` the block: when the last tensor dies, so does `view`.
        weakref.finalize(view, defer, functools.partial(self._release, pin)).atexit = False
        return torch.frombuffer(view, dtype=torch.uint8)[:nbytes].view(dtype)

    def _lock_block(self, nbytes: int) -> Any:
        """A locked block for `nbytes`: a cached one of its size, or a new one."""
        size = self._op.locked_size(nbytes)
        if not self._declared:
            ACCOUNT.keeps_cache(self.name)
            self._declared = True
        limit = cache_limit()
        if limit != self.cache.limit:  # ZERO_PIN_CACHE_BYTES changed: evict (and free) to fit
            self.cache.set_limit(limit)
        block = self.cache.take(size)
        if block is not None:
            return block
        over = memlock_overage(size)
        if over:  # cached blocks count against RLIMIT_MEMLOCK too: release the oldest first
            self.cache.release(over)
            check_memlock(size)
        block = self._new_block(nbytes, size)
        ACCOUNT.add(self.name, size)
        return block

    def _new_block(self, nbytes: int, size: int) -> Any:
        alignment = huge_page_alignment(size)
        retried = False
        while True:
            try:
                return self._op.LockedBlock(nbytes, alignment)
            except OSError as error:
                if error.filename != "mlock":
                    raise
                reason = error.strerror
            # The kernel refused: try once more after releasing every cached block.
            if retried or not self.cache.release():
                raise MemlockLimitError(f"mlock of {format_bytes(size)} failed: {reason}; {FIX}")
            retried = True

    def _release(self, pin: _Pin) -> None:
        # Deferred from the view's finalizer: the last view died. Unless unpin_memory took it
        # (then it is unlocked and uncounted, and freed as `pin` goes), the block is cached or freed.
        if not self._ranges.remove(pin.start, pin):
            return
        if pin.generation != fork_generation():  # pinned before a fork: in this child it was never locked
            ACCOUNT.remove(self.name, pin.block.nbytes)
            return
        self.cache.put(pin.block)  # the blocks it returns to free are dropped here

    def _live_pin(self, extent: tuple[int, int] | None) -> tuple[_Pin, memoryview] | None:
        found = self._ranges.find(*extent) if extent else None
        if found is None:
            return None
        pin = found[1]
        view = pin.view()  # None while a dying pin awaits _release
        return (pin, view) if view is not None else None

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        extent = host_extent(tensor)
        return extent is not None and (self._live_pin(extent) is not None or tensor.is_pinned())

    def unpin_memory(self, tensor: torch.Tensor) -> bool:
        found = self._live_pin(host_extent(tensor))
        if found is None:
            return False
        pin, _view = found  # holding the view keeps _release from running meanwhile
        if not self._ranges.remove(pin.start, pin):  # another thread unpinned it first
            return False
        pin.block.unlock()
        ACCOUNT.remove(self.name, pin.block.nbytes)
        return True
