"""NVMe swap space: one file per slot in this rank's swap directory, moved by the selected swap backend.

A slot named `group0.transformer.h.0.mlp.sub1` of category `optim.master` is the file
`<run dir>/rank<r>/optim.master/group0.transformer.h.0.mlp.sub1.swp`, so every file names its
rank, its parameters' module and its kind. A failed transfer leaves the slot's file
half-written: the space then refuses every later transfer, naming the first failure, so
no step ever reads it back as if it were whole. A transfer that fails as it starts (the
file cannot be opened or allocated) counts too: the step it belonged to has already
written some of its sub-groups' slots and not the others. Every read is checked against the
CRC-32 of what was last written to its slot (_checksums.py): a file changed outside zero is a
SwapIntegrityError naming it, and also leaves the space unusable.
"""
from __future__ import annotations

import hashlib
import re
from concurrent.futures import Future
from pathlib import Path

import torch
import zero_pin
from zero_core.memory import MemoryLedger, Placement
from zero_core.offload import SwapSlot, SwapSpace, SwapTransfer
from zero_plugins import Category

from ..swap import ALIGNMENT, SwapBackend, SwapError, aligned_empty, make_directory, padded_nbytes
from ._checksums import SlotChecksums
from ._run_dir import SwapDirectory

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_NAME_LIMIT = 200  # bytes of a file name, well under every file system's 255


class NvmeSwapSpace(SwapSpace):
    def __init__(self, directory: SwapDirectory, backend: SwapBackend, ledger: MemoryLedger, pin: bool) -> None:
        self.directory = directory
        self.backend = backend
        self._ledger = ledger
        self._pin = pin
        self._slots: dict[str, SwapSlot] = {}
        self._paths: set[Path] = set()
        self._failure: BaseException | None = None
        self._checksums = SlotChecksums()

    @property
    def slot_alignment(self) -> int:
        return ALIGNMENT

    def reserve(self, name: str, numel: int, dtype: torch.dtype, category: Category) -> SwapSlot:
        if name in self._slots:
            raise SwapError(f"swap slot {name!r} ({category}) is reserved twice")
        path = self._path_for(name, category)
        slot = SwapSlot(name, numel, dtype, str(path))
        self._slots[name] = slot
        self._ledger.register_extent(slot, category, Placement.NVME, padded_nbytes(numel * dtype.itemsize))
        return slot

    def staging_buffer(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        buffer = aligned_empty(numel, dtype, pin=self._pin)
        pinned = self._pin and zero_pin.is_pinned(buffer)
        return self._ledger.register(buffer, Category.SWAP_BUFFER, Placement.HOST, pinned)

    def write(self, slot: SwapSlot, source: torch.Tensor) -> SwapTransfer:
        return self._start(slot, source, write=True)

    def read(self, slot: SwapSlot, target: torch.Tensor) -> SwapTransfer:
        return self._start(slot, target, write=False)

    def close(self) -> None:
        """Remove the files (after the backend has finished what it was given) and uncount them."""
        self.backend.close()
        self._checksums.close()
        self.directory.close()
        for slot in self._slots.values():
            self._ledger.release_extent(slot)

    def _start(self, slot: SwapSlot, tensor: torch.Tensor, write: bool) -> SwapTransfer:
        if self._failure is not None:
            raise SwapError(f"swap space {self.directory.path} is unusable after an earlier failed transfer "
                            f"({self._failure}); its files may be half-written, so the run cannot go on from them")
        if self.directory.removed:
            raise SwapError(f"swap space {self.directory.path} was closed by destroy(); the engine cannot step after it")
        blocks = padded_nbytes(slot.numel * slot.dtype.itemsize) // slot.dtype.itemsize
        if tensor.numel() not in (slot.numel, blocks) or tensor.dtype != slot.dtype:
            raise SwapError(f"swap slot {slot.name}: {tensor.numel()} x {tensor.dtype} does not fit its "
                            f"{slot.numel} x {slot.dtype} (or its {blocks} in whole {ALIGNMENT} B blocks)")
        try:
            if write:
                summed = self._checksums.wrote(slot, tensor)  # before the write starts: the buffer is unchanged
                return _Transfer(self, self.backend.write_async(tensor, slot.location), summed)
            return _Transfer(self, self._checksums.read(slot, tensor, self.backend.read_async(tensor, slot.location)))
        except BaseException as error:  # failed before any data moved (open, fallocate): the step is cut short all the same
            self._failure = self._failure or error
            raise

    def _path_for(self, name: str, category: Category) -> Path:
        safe = _UNSAFE.sub("_", name).strip("._") or "tensor"
        if len(safe.encode()) > _NAME_LIMIT:  # keep the start and make it unique with a digest of the whole name
            safe = safe[: _NAME_LIMIT - 17] + "~" + hashlib.sha1(name.encode()).hexdigest()[:16]
        folder = make_directory(self.directory.path / category, f"the {category} swap files")
        path = folder / f"{safe}.swp"
        counter = 1
        while path in self._paths:  # two names that differ only in characters a file name cannot hold
            path = folder / f"{safe}~{counter}.swp"
            counter += 1
        self._paths.add(path)
        return path


class _Transfer:
    """A write (complete once its checksum is taken too), or a read waited for and checked on a checksum thread."""

    def __init__(self, space: NvmeSwapSpace, handle: SwapTransfer | Future[object], summed: Future[int] | None = None
                 ) -> None:
        self._space = space
        self._handle = handle
        self._summed = summed

    def wait(self) -> object:
        try:
            moved = self._handle.result() if isinstance(self._handle, Future) else self._handle.wait()
            if self._summed is not None:
                self._summed.result()  # the buffer may be reused only once it is summed
            return moved
        except BaseException as error:
            self._space._failure = self._space._failure or error
            raise
