"""A save's staging directory, the marker that says it is a save's, and the reclaiming of failed saves' ones.

Before a save makes `<save_dir>/.zero-staging-<run>-<n>` it writes the marker `<that name>.owner` beside it,
holding the directory's name. A save that fails removes its staging directory, its `.latest` pointer and
then its marker; one that was killed leaves them, and the next save (which holds the save_dir's lock, so no
other save is writing) removes exactly the directories their markers name. A directory of that shape without
a marker (another program's, or a copy) is never removed.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from ._lock import SaveLock

_MARKER = ".owner"
_MARKED = re.compile(r"\.zero-staging-[0-9a-f]{12}-\d+")
log = logging.getLogger("zero_core.checkpoint")


class Staging:
    """Rank 0's staging directory of one save and the save_dir's lock, held until `close()`."""

    def __init__(self, path: Path, lock: SaveLock) -> None:
        self.path, self._lock = path, lock

    @classmethod
    def begin(cls, save_dir: Path, name: str, run: str) -> Staging:
        """Lock `save_dir`, reclaim what failed saves left, and make the marked, empty staging directory `name`."""
        lock = SaveLock.acquire(save_dir, run)
        try:
            reclaim(save_dir)
            marker = save_dir / f"{name}{_MARKER}"
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(name)
                file.flush()
                os.fsync(file.fileno())
            (save_dir / name).mkdir()
        except BaseException:
            lock.release()
            raise
        return cls(save_dir / name, lock)

    def close(self) -> None:
        """After the save: remove what is left of the staging directory (all of it when it was not published),
        then its marker, and release the lock."""
        try:
            _remove(self.path.parent, self.path.name)
        finally:
            self._lock.release()


def reclaim(save_dir: Path) -> None:
    """Remove the staging directories (and `.latest` pointers) that the markers in `save_dir` name."""
    for marker in save_dir.glob(f".zero-staging-*{_MARKER}"):
        name = marker.name.removesuffix(_MARKER)
        if not _MARKED.fullmatch(name) or marker.is_symlink() or not marker.is_file() or \
                marker.stat().st_size > 256 or marker.read_text(encoding="utf-8", errors="replace") != name:
            continue  # not a marker a save wrote
        if (save_dir / name).exists():
            log.warning("save_checkpoint: removing %s, which a save that did not finish left", save_dir / name)
        _remove(save_dir, name)


def _remove(save_dir: Path, name: str) -> None:
    """The staging directory `name`, its pointer, and last its marker (kept while anything it names is left)."""
    directory, pointer = save_dir / name, save_dir / f"{name}.latest"
    if directory.is_dir() and not directory.is_symlink():
        shutil.rmtree(directory)
    if pointer.is_file() or pointer.is_symlink():
        pointer.unlink()
    (save_dir / f"{name}{_MARKER}").unlink(missing_ok=True)
