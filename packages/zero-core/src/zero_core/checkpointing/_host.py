"""Copies of activations in host memory: a fresh buffer pinned by the selected pin backend, counted in the ledger.

Shared by `cpu_checkpointing` (checkpointed inputs) and `offload_saved_activations`. The buffer is
always a new CPU tensor: the torch pin backend pins CPU tensors only (a CUDA source would be
refused) and, without an accelerator, returns its argument as it is, so pinning the source itself
would keep no copy at all. The ledger counts it under `activations` at `host.pinned` (or `host`);
the storage tracker sees it first, at the device, and `register` moves it to where it lives.
"""
from __future__ import annotations

import torch
from zero_plugins import Category

from ..accelerator import get_accelerator
from ..memory import Placement
from ._settings import ledger

HOST_CATEGORY = Category.ACTIVATIONS  # the ledger's category for the host copies (at "host.pinned" or "host")


def host_copy(tensor: torch.Tensor) -> torch.Tensor:
    source = tensor.detach()
    accelerator = get_accelerator()
    host = accelerator.pin_memory(torch.empty_like(source, device="cpu"), make_copy=False)
    book = ledger()
    if book is not None:
        book.register(host, HOST_CATEGORY, Placement.HOST, pinned=accelerator.is_pinned(host))
    host.copy_(source, non_blocking=source.device.type != "cpu")
    return host
