"""Copies of activations in host memory: buffers born pinned by the selected pin backend, from a pool reused
step after step, counted in the ledger.

Shared by `cpu_checkpointing` (checkpointed inputs) and `offload_saved_activations`. A host copy lives from a
forward to its backward; the next forward takes the same blocks again (zero_pin.PinnedPool), so after the
first step no host memory is allocated, pinned or copied into pinned memory but the activations themselves
(the engine's per-step pin counter shows it). The torch pin backend pins nothing without an accelerator:
the blocks are then plain host memory, reused alike. The ledger counts each block under `activations` at
`host.pinned` (or `host`) while the pool holds it, free or in use: its memory stays allocated between
steps. The engine trims the pool at each optimizer step (blocks no forward took since are dropped).
"""
from __future__ import annotations

import weakref

import torch
import zero_pin
from zero_plugins import Category

from ..accelerator import Accelerator, get_accelerator
from ..memory import Placement
from ._settings import ledger

HOST_CATEGORY = Category.ACTIVATIONS  # the ledger's category for the host copies (at "host.pinned" or "host")

# One pool per accelerator: a dry run's fake accelerator must never hand out a real block, nor the reverse.
_pools: weakref.WeakKeyDictionary[Accelerator, zero_pin.PinnedPool] = weakref.WeakKeyDictionary()


def host_copy(tensor: torch.Tensor) -> torch.Tensor:
    source = tensor.detach()
    accelerator = get_accelerator()
    host = host_pool(accelerator).empty_like(source)
    book = ledger()
    if book is not None:  # a block already counted stays as it is
        book.register(host, HOST_CATEGORY, Placement.HOST, pinned=accelerator.is_pinned(host))
    host.copy_(source, non_blocking=source.device.type != "cpu")
    return host


def host_pool(accelerator: Accelerator | None = None) -> zero_pin.PinnedPool:
    """The pool of activation host copies for `accelerator` (the current one by default)."""
    accelerator = accelerator or get_accelerator()
    pool = _pools.get(accelerator)
    if pool is None:
        pool = _pools[accelerator] = zero_pin.PinnedPool(lambda nbytes: accelerator.empty_pinned(nbytes, torch.uint8))
    return pool


def trim_host_pool() -> int:
    """Drop the current accelerator's host-copy blocks that no forward took since the last trim; their bytes."""
    pool = _pools.get(get_accelerator())
    return pool.trim() if pool is not None else 0


def release_host_pool() -> None:
    """Forget the current accelerator's host-copy blocks (engine.destroy()); those in use die with their views."""
    pool = _pools.pop(get_accelerator(), None)
    if pool is not None:
        pool.clear()
