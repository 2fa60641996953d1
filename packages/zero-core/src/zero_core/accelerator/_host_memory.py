"""Process memory figures for the CPU accelerator, read from the kernel.

Linux keeps the resident-set high-water mark (VmHWM) and lets a process reset it by
writing "5" to /proc/self/clear_refs, so the CPU accelerator can report and reset a
real peak without sampling.
"""
from __future__ import annotations

import resource
from pathlib import Path

import psutil

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def rss_bytes() -> int:
    return psutil.Process().memory_info().rss


def peak_rss_bytes() -> int:
    if _STATUS.exists():
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    # ru_maxrss is in KiB on Linux, bytes on macOS; only reached off Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS; False where the kernel does not allow it."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def total_bytes() -> int:
    return psutil.virtual_memory().total


def available_bytes() -> int:
    return psutil.virtual_memory().available
