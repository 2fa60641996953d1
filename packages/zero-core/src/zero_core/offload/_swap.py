"""The interface of swap space: where an offload device keeps copies out of memory (NVMe files).

A device whose placement is NVME hands the engine a `SwapSpace`. The engine reserves one
`SwapSlot` per tensor it keeps there (a sub-group's fp32 master, each of its optimizer
state tensors, a stage-3 partition) and moves the slot's contents in and out of staging
buffers the space allocates: the buffers are the only memory the swapped copies take.
zero-core never touches files; zero-offload implements this over its swap-I/O backends.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol

import torch
from zero_plugins import Category


@dataclass(frozen=True, kw_only=True)
class SwapSettings:
    """How copies in swap space go through the pool of staging buffers: from the ds_config's offload block."""

    buffer_count: int
    buffer_numel: int  # elements of one buffer: the swap slice (zero_plugins.swap_slice_numel), or a partition
    pipeline_read: bool = False
    pipeline_write: bool = False
    block_path: str = "zero_optimization.offload_optimizer"
    dtype: torch.dtype = torch.float32  # of the swapped tensors (stage 3's partitions: the compute dtype)

    def pool_bytes(self, alignment: int) -> int:
        """The pool's host memory: `buffer_count` buffers, each laid out in whole blocks of `alignment` bytes."""
        return self.buffer_count * -(-self.buffer_numel * self.dtype.itemsize // alignment) * alignment

    def allocated_bytes(self, alignment: int, *, pinned: bool) -> int:
        """What the pool's one allocation takes: memory that is not pinned (so not the pin backend's aligned
        blocks) is over-allocated by `alignment` bytes, to cut an aligned start from it."""
        return self.pool_bytes(alignment) + (0 if pinned else alignment)


class SwapTransfer(Protocol):
    """One read or write in flight."""

    def wait(self) -> object:
        """Block until it is complete; raise the error that stopped it (naming the file and the call)."""
        ...


@dataclass(frozen=True, repr=False)
class SwapSlot:
    """One tensor's place in swap space: `numel` elements of `dtype`, at `location` (a file, for messages)."""

    name: str
    numel: int
    dtype: torch.dtype
    location: str

    def __repr__(self) -> str:
        return f"SwapSlot({self.name}, {self.numel} x {self.dtype}, {self.location})"


class SwapSpace(ABC):
    @abstractmethod
    def reserve(self, name: str, numel: int, dtype: torch.dtype, category: Category) -> SwapSlot:
        """A slot for a tensor named `name` (unique in this space; a parameter's or sub-group's fully
        qualified name with the tensor's kind), counted in the ledger under `category` at `nvme`."""

    @abstractmethod
    def staging_buffer(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """A host buffer that transfers can use, registered in the ledger as `swap.buffer` (pinned when the
        block's `pin_memory` allows). Views of it at multiples of `slot_alignment` bytes can be transferred."""

    @property
    @abstractmethod
    def slot_alignment(self) -> int:
        """Bytes a buffer view handed to read/write must start at a multiple of."""

    @abstractmethod
    def write(self, slot: SwapSlot, source: torch.Tensor) -> SwapTransfer:
        """Start writing `source` (a view of a staging buffer) into the slot: `slot.numel` elements, or the slot's
        whole `slot_alignment` blocks (what lies past `slot.numel` is written as the file's padding)."""

    @abstractmethod
    def read(self, slot: SwapSlot, target: torch.Tensor) -> SwapTransfer:
        """Start reading the slot into `target` (a view of a staging buffer): `slot.numel` elements, or the slot's
        whole `slot_alignment` blocks (the file's padding is read past `slot.numel`)."""
