"""The CPU accelerator: gloo, host memory, and memory figures from zero-pin's count of the CPU allocator
(a tracker or the process RSS where the count was not started)."""
from __future__ import annotations

import zero_pin
from zero_plugins import ZeroError

from ..memory.active import active_tracker
from . import _host_memory
from ._rulers import HostAllocatorRuler
from ._single_device import SingleDeviceAccelerator


class CpuAccelerator(SingleDeviceAccelerator):
    """All ranks on a host share one "device", the host itself.

    CPU has no allocator statistics of its own. Once `count_allocations()` (zero_pin's count of torch's
    CPU allocator) has started, memory_allocated and its peak are that exact count, like CUDA's. Before,
    inside a region profiled by a storage tracker (zero_core.memory.StorageTracker) they are the tracker's
    figures; elsewhere the process RSS and its high-water mark. `memory_stats_source()` says which.
    """

    name = "cpu"
    detect_priority = 0

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, "always available"

    def communication_backend_name(self) -> str:
        return "gloo"

    def device_name(self, device_index: int | None = None) -> str:
        return "cpu"

    def set_device(self, device_index: int) -> None:
        """Every rank's device is the host: DeepSpeed's CPU accelerator ignores the index, as programs that call
        `set_device(local_rank)` on every rank need. A negative index names no device and is refused."""
        if isinstance(device_index, bool) or not isinstance(device_index, int) or device_index < 0:
            raise ZeroError(f"the cpu accelerator's set_device takes a device index >= 0, such as the "
                            f"LOCAL_RANK (got {device_index!r})")

    def memory_allocated(self, device_index: int | None = None) -> int:
        return self._allocated(peak=False)

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        return self._allocated(peak=True)

    def _allocated(self, *, peak: bool) -> int:
        """The allocator's count where it is on, else the storage tracker's, else the process RSS."""
        ruler = self.allocator_ruler()
        if ruler is not None:
            return ruler.peak_bytes() if peak else ruler.current_bytes()
        tracker = active_tracker()
        if tracker:
            return tracker.peak_bytes("cpu") if peak else tracker.current_bytes("cpu")
        return _host_memory.peak_rss_bytes() if peak else _host_memory.rss_bytes()

    # The host has no caching allocator: what is reserved is what is resident.
    def memory_reserved(self, device_index: int | None = None) -> int:
        return _host_memory.rss_bytes()

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        return _host_memory.peak_rss_bytes()

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        ruler = self.allocator_ruler()
        if ruler is not None:
            ruler.reset_peak()
        tracker = active_tracker()
        if tracker:
            tracker.reset_peak()
        _host_memory.reset_peak_rss()

    def total_memory(self, device_index: int | None = None) -> int:
        return _host_memory.total_bytes()

    def available_memory(self, device_index: int | None = None) -> int:
        return _host_memory.available_bytes()

    def memory_stats_source(self) -> str:
        ruler = self.allocator_ruler()
        if ruler is not None:
            return ruler.name
        return "storage tracker" if active_tracker() else "process RSS"

    def allocator_ruler(self) -> HostAllocatorRuler | None:
        return HostAllocatorRuler() if zero_pin.counting_host_allocations() else None

    def count_allocations(self) -> None:
        """Count torch's CPU allocator from now on (zero_pin.count_host_allocations: builds a small C++ op
        on first use; NativeBuildError says what is missing). Earlier storages are never counted."""
        zero_pin.count_host_allocations()
