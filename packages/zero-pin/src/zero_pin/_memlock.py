"""RLIMIT_MEMLOCK: how much memory this process may lock, checked before the native backend locks."""
from __future__ import annotations

import re
from pathlib import Path

from ._accounting import ACCOUNT
from ._errors import MemlockLimitError
from ._units import format_bytes

CAP_IPC_LOCK = 14  # linux/capability.h: lets a process lock memory beyond RLIMIT_MEMLOCK
_PROC_STATUS = Path("/proc/self/status")
FIX = (
    "raise the limit (`ulimit -l unlimited`, memlock in /etc/security/limits.conf, "
    "or `docker run --ulimit memlock=-1`) or set `pin_memory: false` in the offload config"
)


def memlock_limit() -> dict[str, int | None]:
    """Soft and hard RLIMIT_MEMLOCK in bytes; None means unlimited (or no such limit here)."""
    try:
        import resource
    except ImportError:  # not POSIX: no memlock limit to read (and no native backend)
        return {"soft": None, "hard": None}
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return {"soft": None if soft == resource.RLIM_INFINITY else soft,
            "hard": None if hard == resource.RLIM_INFINITY else hard}


def _proc_status_field(text: str, name: str) -> str | None:
    match = re.search(rf"^{name}:\s*(\S+)", text, re.MULTILINE)
    return match.group(1) if match else None


def _proc_status() -> str:
    try:
        return _PROC_STATUS.read_text()
    except OSError:  # not Linux
        return ""


def locked_bytes() -> int | None:
    """What the kernel already counts against the limit for this process (VmLck); None off Linux."""
    value = _proc_status_field(_proc_status(), "VmLck")
    return int(value) * 1024 if value else None


def can_lock_beyond_limit() -> bool:
    """True with CAP_IPC_LOCK in the effective set (root usually has it), which lifts the limit."""
    caps = _proc_status_field(_proc_status(), "CapEff")
    return caps is not None and bool(int(caps, 16) >> CAP_IPC_LOCK & 1)


def memlock_overage(nbytes: int) -> int:
    """By how many bytes locking `nbytes` more would go over the soft limit now; 0 if it fits.

    Counts everything the kernel counts (VmLck), blocks in zero-pin's cache included.
    """
    soft = memlock_limit()["soft"]
    if soft is None:
        return 0
    already = locked_bytes() or 0  # unknown off Linux: the kernel still refuses, and mlock's error says so
    over = already + nbytes - soft
    # The capability is read only when over the limit: this check runs on every new native block.
    return over if over > 0 and not can_lock_beyond_limit() else 0


def check_memlock(nbytes: int) -> None:
    """Raise MemlockLimitError if locking `nbytes` more would go over the soft limit.

    Blocks held in zero-pin's cache count as free: a new lock releases them first.
    """
    soft = memlock_limit()["soft"]
    if soft is None:
        return
    cached = ACCOUNT.cached()
    if memlock_overage(nbytes) > cached:
        already = max(0, (locked_bytes() or 0) - cached)
        raise MemlockLimitError(
            f"cannot pin {format_bytes(nbytes)}: RLIMIT_MEMLOCK is {format_bytes(soft)} and "
            f"{format_bytes(already)} is already locked; {FIX}"
        )
