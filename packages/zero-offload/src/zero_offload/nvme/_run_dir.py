"""A run's swap directory under `nvme_path`: stable names, no collisions, nothing left behind.

Layout: `<nvme_path>/zero-run-<run id>/rank<r>/<category>/<name>.swp`. The run id is rank 0's
random id, shared by every rank of the run (zero_core.offload.OffloadSettings.run_id), so
the ranks of one run share a directory and two runs, or two jobs on one path, never do.

Each rank holds an exclusive `flock` on `rank<r>.lock` beside its directory for as long as
it lives. The kernel drops the lock when the process dies, however it dies, so a directory
whose lock can be taken belongs to a run that did not finish: a new run removes it before
it checks free space (and says so). The directory is removed at `destroy()` and at normal
interpreter exit.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import time
import warnings
import weakref
from pathlib import Path

import zero_pin

RUN_PREFIX = "zero-run-"


class SwapDirectory:
    """This rank's directory of one run. `SwapDirectory.open` shares one per (path, run, rank) in a process:
    the `offload_optimizer` and `offload_param` devices both swap there, under one lock."""

    _open: dict[tuple[Path, str, int], SwapDirectory] = {}

    @classmethod
    def open(cls, root: Path, run_id: str, rank: int) -> SwapDirectory:
        key = (root.resolve(), run_id, rank)
        directory = cls._open.get(key)
        if directory is None or directory.removed:
            directory = cls._open[key] = cls(root, run_id, rank)
        directory._users += 1
        return directory

    def __init__(self, root: Path, run_id: str, rank: int) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.reclaimed = remove_stale_runs(root)
        self.run = root / f"{RUN_PREFIX}{run_id}"
        self.run.mkdir(exist_ok=True)
        lock_path = self.run / f"rank{rank}.lock"
        lock_fd = _take_lock(lock_path)
        self.path = self.run / f"rank{rank}"
        self.path.mkdir(exist_ok=True)
        self._users = 0
        self._finalizer = weakref.finalize(self, _remove, self.path, lock_path, lock_fd, self.run)

    def close(self) -> None:
        """One user is done; the last one deletes this rank's files and lock (and the run's directory once
        no rank is left in it)."""
        self._users -= 1
        if self._users <= 0:
            self._finalizer()

    @property
    def removed(self) -> bool:
        return not self._finalizer.alive


def remove_stale_runs(root: Path) -> int:
    """Remove the rank directories under `root` whose owner is gone; the bytes they held (one warning says so)."""
    removed: list[str] = []
    reclaimed = 0
    for run in sorted(root.glob(f"{RUN_PREFIX}*")):
        for lock_path in sorted(run.glob("rank*.lock")):
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC)
            except OSError:
                continue  # removed meanwhile by its owner or another run
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue  # its rank is alive
            directory = run / lock_path.stem
            reclaimed += _tree_bytes(directory)
            removed.append(str(directory))
            _remove(directory, lock_path, fd, run)
    if removed:
        warnings.warn(f"removed swap files left by runs that did not finish ({zero_pin.format_bytes(reclaimed)}): "
                      f"{', '.join(removed)}", stacklevel=3)
    return reclaimed


def _take_lock(path: Path) -> int:
    """An exclusive lock on `path`, held until the process closes the descriptor or dies."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another run's cleanup holds it for a moment, then unlinks it
            os.close(fd)
            time.sleep(0.01)
            continue
        # Another run's cleanup may have taken the lock between our open and flock and unlinked the
        # file: then we hold a lock on a file no one can see, and must take a new one.
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _remove(directory: Path, lock_path: Path, lock_fd: int, run: Path) -> None:
    # The directory goes before the lock: a lock without a directory is harmless, the reverse would be unowned.
    shutil.rmtree(directory, ignore_errors=True)
    try:
        lock_path.unlink()
    except FileNotFoundError:
        pass
    os.close(lock_fd)
    try:
        run.rmdir()
    except OSError:
        pass  # other ranks' files are still there


def _tree_bytes(directory: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total
