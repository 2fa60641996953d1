"""Creating and deleting under a swap directory without following links.

docs/reliability.md, "Nothing under `nvme_path` is followed through a link".

A link found where zero creates a directory or a file is refused with a SwapLinkError naming it,
never followed: a link planted in the swap path must not make zero write, or delete, outside it.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from ._errors import SwapLinkError

#: Added to every open of a file zero creates or reads under a swap directory.
NO_FOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY: int = getattr(os, "O_DIRECTORY", 0)


def what_is_there(path: str | os.PathLike[str], dir_fd: int | None = None) -> str | None:
    """'directory', 'link', 'file', another kind, or None when nothing is there (lstat: a link is not followed)."""
    try:
        mode = os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "directory"
    return "file" if stat.S_ISREG(mode) else "special file"


def make_directory(path: Path, purpose: str) -> Path:
    """`path` as a real directory: made if missing, kept if one is there; a link or a file there is refused."""
    try:
        path.mkdir()
    except FileExistsError:
        pass
    found = what_is_there(path)
    if found != "directory":
        raise SwapLinkError(
            f"{path} is a {found}, not a directory, where zero keeps {purpose}; zero never follows links there "
            "(they could point outside nvme_path): remove it, or point nvme_path at another directory")
    return path


def open_directory(path: str | os.PathLike[str], dir_fd: int | None = None) -> int | None:
    """A descriptor of the directory `path`, or None when it is gone or is a link (never followed)."""
    try:
        return os.open(path, os.O_RDONLY | _DIRECTORY | NO_FOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        if what_is_there(path, dir_fd) == "link":
            return None
        raise SwapLinkError(f"{path}: cannot open the directory ({error.strerror})") from None


def link_refusal(path: str) -> SwapLinkError:
    """The error for a swap file found to be a link when opened with O_NOFOLLOW (ELOOP)."""
    return SwapLinkError(f"{path} is a symbolic link where zero keeps a swap file; zero never reads or writes "
                         "through a link there (it could point outside nvme_path): remove the link")


def remove_tree(name: str, dir_fd: int) -> None:
    """Remove the directory `name` in `dir_fd` and all below it, never following a link (a link is removed itself,
    not what it points at). What cannot be removed is left; the caller has nothing better to do with it."""
    for _, folders, files, folder_fd in os.fwalk(name, topdown=False, dir_fd=dir_fd):
        for entry in files:
            _ignore_missing(os.unlink, entry, folder_fd)
        for entry in folders:  # fwalk lists links to directories here, and never walks into them
            remove = os.unlink if what_is_there(entry, folder_fd) == "link" else os.rmdir
            _ignore_missing(remove, entry, folder_fd)
    _ignore_missing(os.rmdir, name, dir_fd)


def _ignore_missing(remove: Callable[..., None], name: str, dir_fd: int) -> None:
    try:
        remove(name, dir_fd=dir_fd)
    except OSError:
        pass
