"""The allocators' exact figures, as the ledger's ruler (memory/ruler.py): CUDA's caching allocator, and
zero-pin's count of torch's CPU allocator (the CPU has no allocator statistics of its own)."""
from __future__ import annotations

import torch
import zero_pin


class HostAllocatorRuler:
    """zero-pin's count: every CPU storage allocated since `zero_pin.count_host_allocations()`, on every thread."""

    name = "CPU allocator count"
    device = "cpu"

    def counts(self, storage: torch.UntypedStorage) -> bool:
        return zero_pin.host_allocator_counts(storage)

    def current_bytes(self) -> int:
        return zero_pin.host_allocator_stats()["current"]

    def peak_bytes(self) -> int:
        return zero_pin.host_allocator_stats()["peak"]

    def reset_peak(self) -> None:
        zero_pin.reset_host_allocator_peak()


class CudaAllocatorRuler:
    """torch.cuda's statistics for one device: every tensor on it is the caching allocator's."""

    name = "CUDA caching allocator"
    device = "cuda"

    def __init__(self, device_index: int) -> None:
        self.device_index = device_index

    def counts(self, storage: torch.UntypedStorage) -> bool:
        return storage.device.type == "cuda" and storage.device.index == self.device_index and storage.nbytes() > 0

    def current_bytes(self) -> int:
        return torch.cuda.memory_allocated(self.device_index)

    def peak_bytes(self) -> int:
        return torch.cuda.max_memory_allocated(self.device_index)

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device_index)
