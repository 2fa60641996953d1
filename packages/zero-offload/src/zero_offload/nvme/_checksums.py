"""What each swap slot held when this run last wrote it, checked when it is read back (issue 33, item 5).

The CRC-32 of a slot's values is taken as its write starts (the buffer stays untouched until the write
is complete) and kept in memory, not in the file: a file changed or replaced between steps, by
another process or by hand, is then found on its next read instead of being stepped from as if it
were the saved state. zlib.crc32 runs at several GB/s and releases the GIL; docs/benchmarks.md
("Swap checksums") gives its cost per step.
"""
from __future__ import annotations

import zlib

import torch
from zero_core.offload import SwapSlot

from ..swap import SwapIntegrityError
from ..swap._buffers import byte_view


def values_crc(slot: SwapSlot, tensor: torch.Tensor) -> int:
    """CRC-32 of the slot's `numel` values at the start of `tensor` (a whole-block view may hold padding past them)."""
    return zlib.crc32(byte_view(tensor[: slot.numel]))


class SlotChecksums:
    def __init__(self) -> None:
        self._written: dict[str, int] = {}

    def wrote(self, slot: SwapSlot, source: torch.Tensor) -> None:
        self._written[slot.name] = values_crc(slot, source)

    def check(self, slot: SwapSlot, target: torch.Tensor) -> None:
        """Raise SwapIntegrityError, naming the file, unless `target` holds what was last written to the slot."""
        expected = self._written.get(slot.name)
        found = values_crc(slot, target)
        if expected == found:
            return
        nbytes = slot.numel * slot.dtype.itemsize
        written = f"zero wrote CRC-32 {expected:#010x}" if expected is not None else "this run never wrote it"
        raise SwapIntegrityError(
            f"swap file {slot.location} (slot {slot.name}, {nbytes} bytes at offset 0) was changed outside zero: its "
            f"bytes read back have CRC-32 {found:#010x}, {written}. Training stops rather than step from state that "
            "is not what was saved; no other process may write under this run's zero-run-<id> directory in nvme_path "
            "(resume from the last checkpoint)")
