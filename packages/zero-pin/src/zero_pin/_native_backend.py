"""The `native` backend: posix_memalign + mlock through a small C++ op (see _native_build).

Unlike the design it follows, unpin_memory never frees: it only releases the lock, and
the memory goes when its last view dies. Reading a tensor after unpinning it is safe.
"""
from __future__ import annotations

import weakref
from typing import Any

import torch

from ._accounting import ACCOUNT
from ._backend import PinBackend
from ._errors import MemlockLimitError
from ._memlock import FIX, check_memlock
from ._native_build import load_op, native_build_state
from ._ranges import RangeManager
from ._tensors import check_pinnable, host_extent
from ._units import format_bytes


class NativeBackend(PinBackend):
    @classmethod
    def available(cls) -> tuple[bool, str]:
        state = native_build_state()
        if state["state"] == "cannot build":
            return False, state["detail"]
        return True, f"op {state['state']}: {state['detail']}"

    def __init__(self) -> None:
        self._op = load_op()
        # Every live block, owned by a weak reference to it (the instance serves the whole process).
        self._ranges: RangeManager[weakref.ref[Any]] = RangeManager()

    def pin_memory(self, tensor: torch.Tensor, make_copy: bool = True, match_shape: bool = True) -> torch.Tensor:
        check_pinnable(tensor, make_copy)
        shape = tuple(tensor.shape) if match_shape else (tensor.numel(),)
        nbytes = tensor.numel() * tensor.element_size()
        # frombuffer makes the storage hold the block, so the block lives as long as any view.
        pinned = torch.frombuffer(self._lock_block(nbytes), dtype=torch.uint8)[:nbytes]
        pinned = pinned.view(tensor.dtype).view(shape)
        if make_copy:
            with torch.no_grad():  # a pinned buffer is storage, not a step of the autograd graph
                pinned.copy_(tensor.reshape(shape))
        return pinned

    def _lock_block(self, nbytes: int) -> Any:
        size = self._op.locked_size(nbytes)
        check_memlock(size)
        try:
            block = self._op.LockedBlock(nbytes)
        except OSError as error:
            if error.filename != "mlock":
                raise
            raise MemlockLimitError(f"mlock of {format_bytes(size)} failed: {error.strerror}; {FIX}") from None
        owner = weakref.ref(block)
        self._ranges.add(block.address, block.address + size, owner)
        ACCOUNT.add(self.name, size)
        weakref.finalize(block, self._forget, block.address, size, owner)
        return block

    def _forget(self, start: int, size: int, owner: weakref.ref[Any]) -> None:
        # The last view died and the block freed its memory; uncount it unless unpin_memory did.
        if self._ranges.remove(start, owner):
            ACCOUNT.remove(self.name, size)

    def _live_block(self, extent: tuple[int, int] | None) -> tuple[int, weakref.ref[Any], Any] | None:
        found = self._ranges.find(*extent) if extent else None
        if found is None:
            return None
        start, owner = found
        block = owner()  # None while a dying block awaits _forget
        return (start, owner, block) if block is not None else None

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        extent = host_extent(tensor)
        return extent is not None and (self._live_block(extent) is not None or tensor.is_pinned())

    def unpin_memory(self, tensor: torch.Tensor) -> bool:
        found = self._live_block(host_extent(tensor))
        if found is None:
            return False
        start, owner, block = found
        if not self._ranges.remove(start, owner):  # another thread unpinned it first
            return False
        block.unlock()
        ACCOUNT.remove(self.name, block.nbytes)
        return True
