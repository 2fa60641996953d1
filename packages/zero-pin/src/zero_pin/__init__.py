"""zero-pin: page-locked host memory through pluggable backends (`torch`, `native`, or a plugin's).

DS_PIN_MEMORY_BACKEND selects the backend (default `torch`). Importing this package does not
import torch; the backends do, when first used.
"""
from ._activity import PinActivity, pin_activity
from ._accounting import PinnedMemoryStats, pinned_memory_stats, pinned_memory_summary, track_pinned_storage
from ._backend import PinBackend
from ._cache import empty_cache
from ._pool import PinnedPool
from ._host_allocator import (
    HostAllocatorStats,
    count_host_allocations,
    counted_blocks,
    counting_host_allocations,
    host_allocator_counts,
    host_allocator_stats,
    reset_host_allocator_peak,
)
from ._errors import MemlockLimitError, NativeBuildError, PinError
from ._memlock import check_memlock, memlock_limit
from ._native_build import NativeOp, native_build_state
from ._units import format_bytes
from ._select import (
    available_backends,
    backend_statuses,
    empty_pinned,
    get_backend,
    is_pinned,
    pin_memory,
    unpin_memory,
)
from .__about__ import __version__

__all__ = [
    "PinActivity",
    "PinnedMemoryStats",
    "PinnedPool",
    "HostAllocatorStats",
    "MemlockLimitError",
    "NativeBuildError",
    "NativeOp",
    "PinBackend",
    "PinError",
    "__version__",
    "available_backends",
    "backend_statuses",
    "check_memlock",
    "count_host_allocations",
    "counted_blocks",
    "counting_host_allocations",
    "empty_cache",
    "empty_pinned",
    "format_bytes",
    "get_backend",
    "host_allocator_counts",
    "host_allocator_stats",
    "is_pinned",
    "memlock_limit",
    "native_build_state",
    "pin_activity",
    "pin_memory",
    "pinned_memory_stats",
    "pinned_memory_summary",
    "reset_host_allocator_peak",
    "track_pinned_storage",
    "unpin_memory",
]
