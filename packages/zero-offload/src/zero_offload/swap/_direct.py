"""Whether a swap path can do O_DIRECT, and the buffered mode for paths that cannot.

Decision (docs/offload.md, "NVMe swap I/O"): a path that cannot do O_DIRECT is an error that
names the way to proceed, never a silent switch to buffered I/O. Buffered swapping goes
through the page cache: the swapped bytes then also occupy host memory (on tmpfs they live
only there), which is what offloading to NVMe is meant to avoid, and bandwidth figures
measure memory, not the disk. Who still wants it (tests, a RAM disk on purpose) sets
ZERO_SWAP_BUFFERED=1 (or passes buffered=True, `zero swap bench --buffered`), and the same
code runs with plain reads and writes, without O_DIRECT; alignment is still required, so a
program that works buffered works with O_DIRECT.

Two cases are caught before any data moves:
- the path lies on a file system that keeps files in memory (tmpfs, ramfs, ...). Linux 6.6+
  accepts O_DIRECT on tmpfs but serves it from RAM, so the open alone proves nothing;
- open(..., O_DIRECT) fails with EINVAL (file systems without direct I/O, some FUSE ones).
"""
from __future__ import annotations

import errno
import os
import threading

from zero_plugins import env_flag

from ._errors import DirectIOUnsupportedError

BUFFERED_ENV = "ZERO_SWAP_BUFFERED"
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs", "shm"})
O_DIRECT: int = getattr(os, "O_DIRECT", 0)

_FIX = (f"use a directory on a disk file system (ext4, xfs, ...), or set {BUFFERED_ENV}=1 to swap through "
        "the page cache without O_DIRECT (buffered mode: the swapped data then also occupies host memory)")

_lock = threading.Lock()
_checked: dict[int, str | None] = {}  # st_dev -> why O_DIRECT is unusable there ({directory} for the path), or None


def buffered_from_env() -> bool:
    """ZERO_SWAP_BUFFERED as zero_plugins.env_flag reads it (default off); a value it does not accept is an error."""
    return env_flag(BUFFERED_ENV, False)


def filesystem_type(path: str) -> str | None:
    """The file system type of the mount holding `path` (from /proc/self/mountinfo), or None if unknown."""
    try:
        device = os.stat(path).st_dev
        with open("/proc/self/mountinfo", encoding="utf-8") as mountinfo:
            lines = mountinfo.read().splitlines()
    except OSError:
        return None
    wanted = f"{os.major(device)}:{os.minor(device)}"
    for line in lines:
        fields = line.split()
        if len(fields) > 2 and fields[2] == wanted and "-" in fields:
            return fields[fields.index("-") + 1]
    return None


def direct_io_problem(directory: str) -> str | None:
    """Why files in `directory` cannot be swapped with O_DIRECT, or None when they can.

    Remembered per device: the checks run once per file system and process.
    """
    device = os.stat(directory).st_dev
    with _lock:
        checked = device in _checked
        found = _checked.get(device)
    if not checked:
        problem = _probe(directory)
        found = problem.replace(directory, "{directory}") if problem else None
        with _lock:
            _checked[device] = found
    # The problem is the file system's, remembered per device; the message names the directory asked about.
    return found.replace("{directory}", directory) if found else None


def _probe(directory: str) -> str | None:
    if not O_DIRECT:
        return "this platform has no O_DIRECT"
    fstype = filesystem_type(directory)
    if fstype in MEMORY_FILESYSTEMS:
        return (f"{directory} is on {fstype}, which keeps files in host memory: O_DIRECT there never reaches "
                "a disk, so swapping to it would use RAM")
    probe = os.path.join(directory, f".zero-swap-probe-{os.getpid()}-{threading.get_ident()}")
    try:
        fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_EXCL | O_DIRECT, 0o600)
    except OSError as error:
        if error.errno == errno.EINVAL:
            return f"{directory} ({fstype or 'unknown file system'}) refuses O_DIRECT: open(..., O_DIRECT) failed: {error.strerror}"
        return None  # permissions and the like: reported by the request itself, naming the file
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass
    return None


def check_direct_io(directory: str) -> None:
    """Raise DirectIOUnsupportedError, naming the fix, if `directory` cannot do O_DIRECT."""
    problem = direct_io_problem(directory)
    if problem:
        raise DirectIOUnsupportedError(f"{problem}; {_FIX}")


def einval_message(path: str) -> str:
    """For EINVAL from open(..., O_DIRECT) on a path the probe did not catch."""
    return f"{path} refuses O_DIRECT (open failed: Invalid argument); {_FIX}"
