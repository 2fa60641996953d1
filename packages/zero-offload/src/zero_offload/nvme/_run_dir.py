"""A run's swap directory under `nvme_path`: stable names, no collisions, nothing left behind.

Layout: `<nvme_path>/zero-run-<run id>/rank<r>/<category>/<name>.swp`. The run id is rank 0's
random id, shared by every rank of the run (zero_core.offload.OffloadSettings.run_id), so
the ranks of one run share a directory and two runs, or two jobs on one path, never do.

Each rank holds an exclusive `flock` on `rank<r>.lock` beside its directory for as long as
it lives. The kernel drops the lock when the process dies, however it dies, so a directory
whose lock can be taken belongs to a run that did not finish: a new run removes it before
it checks free space (and says so). The directory is removed at `destroy()` and at normal
interpreter exit.

Links (docs/reliability.md, "Nothing under `nvme_path` is followed through a link"): the run and
rank directories are made only where nothing or a real directory is; a stale run is
removed through descriptors opened with O_NOFOLLOW, and only the rank directory that its lock
file names: the lock holds MARKER and the directory's name, written by the run that made it. A
link, or a lock without the marker, is skipped and named in the cleanup's warning.
"""
from __future__ import annotations

import fcntl
import os
import threading
import warnings
import weakref
from pathlib import Path

import zero_pin

from ..swap import NO_FOLLOW, make_directory, open_directory, remove_tree, what_is_there

RUN_PREFIX = "zero-run-"
MARKER = "zero-offload swap directory: "  # then the rank directory's name, in each rank's lock file


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
        self.run = make_directory(root / f"{RUN_PREFIX}{run_id}", "this run's swap files")
        lock_path = self.run / f"rank{rank}.lock"
        lock_fd = _take_lock(lock_path)
        self.path = self.run / f"rank{rank}"
        try:
            make_directory(self.path, f"rank {rank}'s swap files")
        except BaseException:
            os.close(lock_fd)
            raise
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
    """Remove the rank directories under `root` whose owner is gone; the bytes they held (one warning says so,
    and names what was skipped: links, and locks that zero did not write)."""
    removed: list[str] = []
    skipped: list[str] = []
    reclaimed = 0
    for run in sorted(root.glob(f"{RUN_PREFIX}*")):
        run_fd = open_directory(run)
        if run_fd is None:
            if what_is_there(run) == "link":
                skipped.append(f"{run} (a link, not followed)")
            continue
        try:
            for name in sorted(os.listdir(run_fd)):
                if name.startswith("rank") and name.endswith(".lock"):
                    reclaimed += _remove_if_stale(run, run_fd, name, removed, skipped)
        finally:
            os.close(run_fd)
    if removed:
        warnings.warn(f"removed swap files left by runs that did not finish ({zero_pin.format_bytes(reclaimed)}): "
                      f"{', '.join(removed)}", stacklevel=3)
    if skipped:
        warnings.warn(f"left in place under {root}, not zero's to remove: {', '.join(skipped)}", stacklevel=3)
    return reclaimed


def _remove_if_stale(run: Path, run_fd: int, lock_name: str, removed: list[str], skipped: list[str]) -> int:
    """Remove the rank directory that the lock `lock_name` in `run` names, when no process holds that lock."""
    try:
        fd = os.open(lock_name, os.O_RDWR | os.O_CLOEXEC | NO_FOLLOW, dir_fd=run_fd)
    except OSError:
        if what_is_there(lock_name, run_fd) == "link":
            skipped.append(f"{run / lock_name} (a link, not followed)")
        return 0  # otherwise removed meanwhile by its owner or another run
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return 0  # its rank is alive
    name = lock_name.removesuffix(".lock")
    if not _still_named(fd, lock_name, run_fd):
        os.close(fd)
        return 0  # another run's cleanup removed it between our open and flock
    if os.pread(fd, 256, 0) != f"{MARKER}{name}\n".encode():
        os.close(fd)
        skipped.append(f"{run / lock_name} (not a lock zero wrote)")
        return 0
    kind = what_is_there(name, run_fd)
    if kind not in ("directory", None):
        os.close(fd)
        skipped.append(f"{run / name} (a {kind}, not followed)")
        return 0
    reclaimed = _tree_bytes(name, run_fd) if kind else 0
    removed.append(str(run / name))
    _remove(run / name, run / lock_name, fd, run)
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
            fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | NO_FOLLOW, 0o600)
        except FileNotFoundError:  # the run's directory went away (the last rank of a stale run removed it)
            make_directory(path.parent, "this run's swap files")
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # no one else opens this name: never blocks
            os.write(fd, f"{MARKER}{path.stem}\n".encode())  # what a later cleanup may remove
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
    # Through the run's descriptor, opened without following a link: a run directory replaced by a link since
    # it was made is left alone, and the removal never follows a link inside the rank directory.
    run_fd = open_directory(run)
    try:
        if run_fd is not None and what_is_there(directory.name, run_fd) == "directory":
            remove_tree(directory.name, run_fd)
        if run_fd is not None:
            try:
                os.unlink(lock_path.name, dir_fd=run_fd)
            except FileNotFoundError:
                pass
    finally:
        os.close(lock_fd)
        if run_fd is not None:
            os.close(run_fd)
    try:
        run.rmdir()  # never follows a link: rmdir of one fails
    except OSError:
        pass  # other ranks' files are still there


def _still_named(fd: int, name: str, dir_fd: int) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_ino
    except FileNotFoundError:
        return False


def tree_bytes(directory: Path) -> int:
    """Disk bytes of the files under `directory` (0 unless it is a real directory; links are not followed)."""
    return _tree_bytes(directory) if what_is_there(directory) == "directory" else 0


def _tree_bytes(directory: str | Path, dir_fd: int | None = None) -> int:
    total = 0
    for _, _, files, folder_fd in os.fwalk(directory, dir_fd=dir_fd):
        for name in files:
            try:
                total += os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_blocks * 512
            except OSError:
                pass
    return total
