"""A pool of host buffers that are born pinned and reused: after the first step of a loop whose buffers
have the same sizes each step, taking one allocates nothing, pins nothing and copies nothing.

A block is free again once nothing but the pool refers to its memory: every tensor handed out is a
view of the block's own storage, so the storage's use count says when the last one died (no callback
runs from a garbage collection). Blocks are matched by exact byte size. `trim()` drops the blocks that
stayed free since the previous trim, so shapes that change from step to step do not pile up.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# Makes one flat uint8 buffer of n bytes, born pinned (zero_pin.empty_pinned, or an accelerator's).
AllocateBlock = Callable[[int], "torch.Tensor"]


class _Block:
    __slots__ = ("tensor", "idle_uses", "used_since_trim")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        self.idle_uses = _use_count(tensor)  # the references of the pool's own tensor alone
        self.used_since_trim = True

    def free(self) -> bool:
        return _use_count(self.tensor) <= self.idle_uses


class PinnedPool:
    """Pinned host buffers by byte size, reused once every view of one is gone; thread safe."""

    def __init__(self, allocate: AllocateBlock | None = None) -> None:
        self._allocate = allocate or _empty_pinned_bytes
        self._lock = threading.Lock()
        self._blocks: dict[int, list[_Block]] = {}
        self.created = 0  # blocks allocated so far; constant once the loop reuses them all

    def empty_like(self, tensor: torch.Tensor) -> torch.Tensor:
        """An uninitialised host tensor shaped like `tensor`, in a pooled block, pinned where the backend pins.

        It keeps `tensor`'s strides when they pack its elements densely (as torch.empty_like does): kernels
        that read a copy laid out otherwise may sum in another order, and results would differ in the last bit."""
        import torch

        nbytes = tensor.numel() * tensor.element_size()
        flat = self._take(nbytes)[:nbytes].view(tensor.dtype)
        if _dense(tensor.shape, tensor.stride()):
            return flat.as_strided(tensor.shape, tensor.stride())
        return flat.view(tensor.shape)

    def held_bytes(self) -> int:
        """Bytes of every block the pool holds, in use or free."""
        with self._lock:
            return sum(size * len(bucket) for size, bucket in self._blocks.items())

    def trim(self) -> int:
        """Drop the blocks nobody took since the previous trim; returns their bytes."""
        with self._lock:
            dropped = 0
            for size, bucket in list(self._blocks.items()):
                kept = [block for block in bucket if block.used_since_trim or not block.free()]
                dropped += size * (len(bucket) - len(kept))
                for block in kept:
                    block.used_since_trim = False
                if kept:
                    self._blocks[size] = kept
                else:
                    del self._blocks[size]
            return dropped

    def clear(self) -> None:
        """Forget every block; those still in use live on until their views die."""
        with self._lock:
            self._blocks.clear()

    def _take(self, nbytes: int) -> torch.Tensor:
        with self._lock:
            bucket = self._blocks.setdefault(nbytes, [])
            for block in bucket:
                if block.free():
                    block.used_since_trim = True
                    return block.tensor
        # Outside the lock: the allocation may run a garbage collection, or be slow (page locking).
        block = _Block(self._allocate(nbytes))
        with self._lock:
            self._blocks.setdefault(nbytes, []).append(block)
            self.created += 1
        return block.tensor


def _dense(shape: tuple[int, ...] | torch.Size, stride: tuple[int, ...]) -> bool:
    """Whether the strides lay the elements out without gaps or overlaps (a permutation of contiguous ones)."""
    expected = 1
    for size, step in sorted(((size, step) for size, step in zip(shape, stride) if size != 1), key=lambda pair: pair[1]):
        if step != expected:
            return False
        expected *= size
    return True


def _use_count(tensor: torch.Tensor) -> int:
    import torch

    # How many owners the storage has (tensors, views, storage objects): torch's own count, not Python's.
    return int(torch._C._storage_Use_Count(tensor.untyped_storage()._cdata))


def _empty_pinned_bytes(nbytes: int) -> torch.Tensor:
    import torch

    from ._select import empty_pinned

    return empty_pinned(nbytes, torch.uint8)
