"""An exact count of torch's CPU allocator, the ruler for memory on the CPU accelerator.

CPU has no allocator statistics (`torch.cuda.memory_allocated` has no CPU twin). The choice here
is an allocator hook, not torch.profiler's memory events: a small C++ allocator
(csrc/counting_allocator.cpp) stands in front of c10's CPU allocator and counts every allocation
and free, on every thread, exactly, for one lock and one hash-map update each. The profiler's
events are exact too, but they record every op (too slow to leave on), and an allocation made
on a thread the profiler does not follow (gloo's workers) is missed while its free may be seen,
so a running sum drifts. Only storages allocated after `count_host_allocations()` are counted.
"""
from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, TypedDict

from ._native_build import COUNTING_ALLOCATOR_OP

if TYPE_CHECKING:
    import torch


class HostAllocatorStats(TypedDict):
    """Bytes of CPU storages allocated since the count began and still alive (current), the most at
    once since the last peak reset (peak), how many allocations were counted, and how many are alive."""

    current: int
    peak: int
    allocations: int
    live_blocks: int


def count_host_allocations() -> None:
    """Count every later allocation of torch's CPU allocator (builds the op on first use; idempotent).

    Call it before the model is built, so its weights are counted too. Raises NativeBuildError
    naming what is missing when the op cannot build.
    """
    COUNTING_ALLOCATOR_OP.load().install()


def counting_host_allocations() -> bool:
    """Whether this process counts the CPU allocator (never builds anything)."""
    op = COUNTING_ALLOCATOR_OP.loaded()
    return op is not None and bool(op.installed())


def host_allocator_stats() -> HostAllocatorStats:
    """The count now; raises RuntimeError when `count_host_allocations()` was not called."""
    op = _installed_op()
    stats: HostAllocatorStats = op.stats()
    return stats


def reset_host_allocator_peak() -> None:
    """Set the peak to the current bytes, as torch.cuda.reset_peak_memory_stats does for a GPU."""
    _installed_op().reset_peak()


def host_allocator_counts(storage: torch.UntypedStorage) -> bool:
    """Whether the count holds this storage (it was allocated by torch's CPU allocator after the count began)."""
    if storage.device.type != "cpu" or storage.nbytes() == 0:
        return False
    return bool(_installed_op().counted_bytes(storage.data_ptr()))


def counted_blocks() -> list[tuple[int, int]]:
    """(address, bytes) of every counted allocation alive: what to look for when a ledger misses memory."""
    blocks: list[tuple[int, int]] = _installed_op().live_blocks()
    return blocks


def _installed_op() -> ModuleType:
    op = COUNTING_ALLOCATOR_OP.loaded()
    if op is None or not op.installed():
        raise RuntimeError("the CPU allocator is not being counted: call zero_pin.count_host_allocations() first "
                           "(before the model is built, so its weights are counted)")
    return op
