"""The dry run's allocator: every fake storage an op creates, counted as the target device's allocator would.

The storage tracker (a TorchDispatchMode), above FakeTensorMode, sees each op's outputs (fake tensors: a shape, a
dtype, a device, no memory) and counts each new storage once, until a weak reference says it died. The
CUDA caching allocator hands out blocks in multiples of 512 bytes, and its `memory_allocated` counts the
blocks, so on a CUDA target each storage counts rounded up to 512; the CPU allocator's count is exact.
What an op allocates inside its kernel and frees before returning (a workspace) never appears as an output,
so a dry run does not see it: the report says so.
"""
from __future__ import annotations

import torch

from ..memory import StorageTracker

CUDA_BLOCK_BYTES = 512
# A CPU build of torch cannot make even a fake CUDA tensor's view, so a CUDA target is traced on fake tensors of
# the "lazy" device type, which needs no backend, and every report names it "cuda". The engine never branches on
# the device type's name, only on whether it is the host's.
TRACED_DEVICE = {"cuda": "lazy", "cpu": "cpu"}
TARGET_OF = {traced: target for target, traced in TRACED_DEVICE.items()}


def block_bytes(nbytes: int, device: str) -> int:
    """What the allocator of the device traced as `device` counts for a storage of `nbytes`."""
    if TARGET_OF.get(device) == "cuda" and nbytes > 0:
        return -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES
    return nbytes


class FakeAllocator(StorageTracker):
    """The storage tracker counting a dry run's fake storages as the target's allocator would (`block_bytes`);
    enter it after FakeTensorMode, so that it sees that mode's outputs."""

    def __init__(self) -> None:
        super().__init__(block_bytes=block_bytes)


class FakeAllocatorRuler:
    """The dry run's allocator for one device type, as the ledger's ruler (memory/ruler.py, AllocatorRuler)."""

    def __init__(self, allocator: FakeAllocator, device: str) -> None:
        self._allocator, self.device = allocator, device
        target = TARGET_OF[device]
        what = "the CUDA caching allocator's 512-byte blocks" if target == "cuda" else "the CPU allocator's bytes"
        self.name = f"dry run: fake {target} storages counted as {what}"

    def counts(self, storage: torch.UntypedStorage) -> bool:
        return storage.nbytes() > 0 and self._allocator.device_of(storage) == self.device

    def current_bytes(self) -> int:
        return self._allocator.current_bytes(self.device)

    def peak_bytes(self) -> int:
        return self._allocator.peak_bytes(self.device)

    def reset_peak(self) -> None:
        self._allocator.reset_peak()
