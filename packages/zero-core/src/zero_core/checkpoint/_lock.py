"""One saver per save_dir at a time: `<save_dir>/.zero-save.lock`, made with O_EXCL, names its owner.

Two processes saving into one save_dir would race on `latest` and each would take the other's staging
directory for a leftover; one of them could publish a tag with nothing in it. So rank 0 of a save (and
`zero checkpoint import`) creates the lock before it makes its staging directory and removes it once the
save is published or abandoned. The lock holds the owner's pid, host and run: a second saver is refused with
a message naming them. A lock whose pid no longer runs on this host (a save that was killed) is taken over,
with a warning; one from another host cannot be checked from here, so the message says how to remove it.
"""
from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from ._errors import CheckpointError

LOCK = ".zero-save.lock"
_MAX_LOCK_BYTES = 4096
log = logging.getLogger("zero_core.checkpoint")


@dataclass(frozen=True)
class Owner:
    pid: int
    host: str
    run: str

    def running(self) -> bool | None:
        """Whether the owner still runs; None when it is on another host (nothing here can tell)."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # another user's live process
        return True

    def describe(self) -> str:
        here = self.pid == os.getpid() and self.host == socket.gethostname()
        return "this process (another engine, or a save of it that is still running)" if here else \
            f"process {self.pid} on host {self.host}"


class SaveLock:
    """The lock of one save into `save_dir`; `release()` removes it (only while it is still this save's)."""

    def __init__(self, path: Path, owner: Owner) -> None:
        self.path, self.owner = path, owner

    @classmethod
    def acquire(cls, save_dir: Path, run: str) -> SaveLock:
        path = save_dir / LOCK
        owner = Owner(os.getpid(), socket.gethostname(), run)
        if _create(path, owner):
            return cls(path, owner)
        holder = _read(path)
        if holder is not None and holder.running() is False and _take_over(path, holder):
            log.warning("save_checkpoint: %s was left by %s, which no longer runs (a save that was killed); "
                        "this save takes it over", path, holder.describe())
            if _create(path, owner):
                return cls(path, owner)
            holder = _read(path)
        raise CheckpointError(_refusal(save_dir, path, holder))

    def release(self) -> None:
        if _read(self.path) == self.owner:
            self.path.unlink(missing_ok=True)


def _create(path: Path, owner: Owner) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        json.dump({"pid": owner.pid, "host": owner.host, "run": owner.run}, file)
        file.flush()
        os.fsync(file.fileno())
    return True


def _read(path: Path) -> Owner | None:
    """The lock's owner; None when it is gone, not a regular file, or not a lock zero wrote."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        content = file.read(_MAX_LOCK_BYTES)
    try:
        fields = json.loads(content)
        return Owner(int(fields["pid"]), str(fields["host"]), str(fields["run"]))
    except (ValueError, TypeError, KeyError):
        return None


def _take_over(path: Path, holder: Owner) -> bool:
    """Move the dead owner's lock aside (one rename: of two savers taking over, one wins) and remove it."""
    aside = path.with_name(f"{LOCK}.stale-{os.getpid()}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return True  # another saver removed it first: try to create ours
    if _read(aside) != holder:  # a new owner's lock was made between our read and the rename: give it back
        os.rename(aside, path)
        return False
    aside.unlink()
    return True


def _refusal(save_dir: Path, path: Path, holder: Owner | None) -> str:
    if holder is None:
        return (f"save_checkpoint: {path} exists but is not a lock zero can read, so another save may be running "
                f"into {save_dir}; if none is, remove {path} and save again")
    where = "" if holder.running() is not None else \
        f" (it cannot be checked from host {socket.gethostname()}: if it no longer runs, remove {path})"
    return (f"save_checkpoint: another save is writing into {save_dir}: {holder.describe()} holds {path}{where}. "
            "Two saves into one save_dir would race on `latest` and on each other's files; wait for it to finish "
            "or pass another save_dir")
