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
import threading
import warnings
import weakref
from pathlib import Path

import zero_pin

RUN_PREFIX = "zero-run-"


class SwapDirectory:
    """This rank's directory of one run. `SwapDirectory.open` shares one per (path, run, rank) in a process:
    the `offload_optimizer` and `offload_param` devices both swap there, under one lock."""

    # Weak: the devices own the directory. One that no device holds any more (an engine dropped without
    # destroy(), or one whose initialize failed after its devices were opened) is removed when collected.
    _open: weakref.WeakValueDictionary[tuple[Path, str, int], SwapDirectory] = weakref.WeakValueDictionary()

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
            if not _still_named(fd, lock_path):
                os.close(fd)
                continue  # another run's cleanup removed it between our open and flock
            directory = run / lock_path.stem
            reclaimed += _tree_bytes(directory)
            removed.append(str(directory))
            _remove(directory, lock_path, fd, run)
    if removed:
        warnings.warn(f"removed swap files left by runs that did not finish ({zero_pin.format_bytes(reclaimed)}): "
                      f"{', '.join(removed)}", stacklevel=3)
    return reclaimed


def _take_lock(path: Path) -> int:
    """An exclusive lock on `path`, held until the process closes the descriptor or dies.

    The file is locked under a name no cleanup looks at and then renamed to `path`, so `path`
    never exists unlocked: a run starting beside this one (another rank of it, even) cannot
    take a lock that is being created for the stale one of a dead process and remove it.
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}")
    while True:
        try:
            fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:  # the run's directory went away (the last rank of a stale run removed it)
            path.parent.mkdir(parents=True, exist_ok=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # no one else opens this name: never blocks
            os.rename(temporary, path)
            return fd
        except FileNotFoundError:  # removed with the run's directory between open and rename
            os.close(fd)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise


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


def _still_named(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _tree_bytes(directory: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total
