"""What each swap slot held when this run last wrote it, checked when it is read back (issue 33, item 5).

The CRC-32 of a slot's values is taken as its write starts (the buffer stays untouched until the
write is complete) and kept in memory, not in the file: a file changed or replaced between steps,
by another process or by hand, is then found on its next read instead of being stepped from as if
it were the saved state. The sums are computed on two threads of their own (zlib.crc32 releases the
GIL), so the step goes on while they run: a write is complete once its sum is taken too, a read
once it is checked. docs/benchmarks.md ("Swap checksums") gives the cost per step.
"""
from __future__ import annotations

import zlib
from concurrent.futures import Future, ThreadPoolExecutor

import torch
from zero_core.offload import SwapSlot, SwapTransfer

from ..swap import SwapIntegrityError, byte_view

_THREADS = 2  # one may wait for a read to land while the other sums a buffer


def values_crc(slot: SwapSlot, tensor: torch.Tensor) -> int:
    """CRC-32 of the slot's `numel` values at the start of `tensor` (a whole-block view may hold padding past them)."""
    return zlib.crc32(byte_view(tensor[: slot.numel]))


class SlotChecksums:
    def __init__(self) -> None:
        self._written: dict[str, Future[int]] = {}
        self._threads = ThreadPoolExecutor(_THREADS, thread_name_prefix="zero-swap-crc")

    def wrote(self, slot: SwapSlot, source: torch.Tensor) -> Future[int]:
        """Start summing what is being written to the slot; its buffer must not change until the future is done."""
        future = self._written[slot.name] = self._threads.submit(values_crc, slot, source)
        return future

    def read(self, slot: SwapSlot, target: torch.Tensor, transfer: SwapTransfer) -> Future[object]:
        """Wait for the read on a checksum thread, then check it: the future raises the read's error, or a
        SwapIntegrityError unless `target` holds what was last written to the slot."""
        expected = self._written.get(slot.name)
        return self._threads.submit(_checked, slot, target, transfer, expected)

    def close(self) -> None:
        self._threads.shutdown(wait=True)


def _checked(slot: SwapSlot, target: torch.Tensor, transfer: SwapTransfer, expected: Future[int] | None) -> object:
    moved = transfer.wait()
    found = values_crc(slot, target)
    wrote = expected.result() if expected is not None else None
    if wrote == found:
        return moved
    nbytes = slot.numel * slot.dtype.itemsize
    written = f"zero wrote CRC-32 {wrote:#010x}" if wrote is not None else "this run never wrote it"
    raise SwapIntegrityError(
        f"swap file {slot.location} (slot {slot.name}, {nbytes} bytes at offset 0) was changed outside zero: its "
        f"bytes read back have CRC-32 {found:#010x}, {written}. Training stops rather than step from state that "
        "is not what was saved; no other process may write under this run's zero-run-<id> directory in nvme_path "
        "(resume from the last checkpoint)")
