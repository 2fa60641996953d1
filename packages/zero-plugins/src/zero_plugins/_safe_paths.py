"""Writes, renames and deletes that never go through a symbolic link (docs/reliability.md, "Links").

A directory we write into may hold links we did not make: a Hugging Face snapshot's files are links
into a shared cache, and anyone who can write to a shared directory can plant one. Writing to such a
name through open() changes the file it points to. So every file zero writes is either

- new in a directory zero made itself (write_bytes_no_follow: O_NOFOLLOW, so a link is refused), or
- a replacement (replace_file, staged_file): written under a private temporary directory beside it
  and renamed over the name. A rename replaces the link itself; its target is never opened.

and every tree zero deletes is one it made and marked (remove_tree_we_made), removed without following
a link inside it.
"""
from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ._errors import ZeroError

_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class UnsafePathError(ZeroError):
    """A path zero would have written or deleted through a symbolic link, or that is not what zero made."""


def is_link(path: str | os.PathLike[str]) -> bool:
    """Whether `path` itself is a symbolic link (a dangling one too), never following it."""
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):  # nothing there, or a file where a directory should be
        return False
    except ValueError:
        raise UnsafePathError(f"{os.fsdecode(path)!r}: a path cannot contain a NUL character") from None


def refuse_link(path: str | os.PathLike[str], what: str, fix: str) -> None:
    """Raise UnsafePathError if `path` is a symbolic link: "WHAT PATH is a symbolic link (to TARGET); FIX"."""
    if is_link(path):
        raise UnsafePathError(f"{what} {os.fsdecode(path)} is a symbolic link (to {os.readlink(path)}); {fix}")


def write_bytes_no_follow(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Write `data` to `path` in a directory zero made, refusing a link at `path` (O_NOFOLLOW) and fsyncing
    the file when `durable`."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NO_FOLLOW, 0o666)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UnsafePathError(f"{os.fsdecode(path)} is a symbolic link, which zero does not write through; "
                                  "move it away") from None
        raise
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def staged_file(path: str | os.PathLike[str], *, durable: bool = True) -> Iterator[Path]:
    """A fresh path to write the new content of `path` to (by name, with any writer); on leaving the block it
    replaces `path` by rename, whole, and a link at `path` is replaced, never written through.

    The fresh path is in a private directory (mode 0700, made by mkdtemp) beside `path`, so nobody else
    can put a link there, and the rename stays on one filesystem. An exception leaves `path` as it was.
    """
    target = Path(path)
    if target.is_dir() and not is_link(target):
        raise UnsafePathError(f"{target} is a directory; pass the path of a file")
    private = Path(tempfile.mkdtemp(prefix=".zero-write-", dir=target.parent))
    try:
        fresh = private / target.name
        yield fresh
        if not stat.S_ISREG(os.lstat(fresh).st_mode):
            raise UnsafePathError(f"{fresh} is not a regular file after it was written; nothing was replaced")
        if durable:
            fsync_path(fresh)
        os.replace(fresh, target)
        if durable:
            fsync_path(target.parent)
    finally:
        shutil.rmtree(private, ignore_errors=True)  # ours: mkdtemp made it, and nothing else can write into it


def replace_file(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Replace `path` with a regular file holding `data`, whole (staged_file): a link there is replaced,
    its target left as it was."""
    with staged_file(path, durable=durable) as fresh:
        write_bytes_no_follow(fresh, data, durable=False)  # staged_file fsyncs it


def remove_tree_we_made(path: str | os.PathLike[str], marker: str) -> bool:
    """Remove the directory `path` if zero made it: a real directory (not a link) holding a regular file
    named `marker`, which its maker wrote first. Returns whether it was removed; anything else is left alone.

    Links inside are removed as names, never followed (shutil.rmtree works through directory descriptors).
    """
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode) or not stat.S_ISREG(os.lstat(Path(path, marker)).st_mode):
            return False
    except FileNotFoundError:
        return False
    shutil.rmtree(path)
    return True


def fsync_path(path: str | os.PathLike[str]) -> None:
    """fsync a file or directory (a directory: so the renames and new names in it survive a crash), not through a link."""
    fd = os.open(path, os.O_RDONLY | _NO_FOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
