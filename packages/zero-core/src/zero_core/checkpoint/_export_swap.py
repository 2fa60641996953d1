"""How an export publishes: OUT holds one whole export or the one before it, never a mix of two.

An export writes into a staging directory beside OUT, `.zero-export-<token>` (same filesystem), whose
first file is MARKER: OUT's name, the name OUT is moved aside to (`.zero-export-<token>.old`), and the
writer's host and process. Publishing hard-links the files the user keeps in OUT (a tokenizer, another
tool's config) into the staging directory, renames OUT aside, renames the staging directory to OUT,
then clears the aside: it deletes there only what an export wrote (the two file lists) and links it
made, moves back anything OUT lacks (directories, files it could not link), and removes MARKER last.

An export killed at any point is undone or finished by the next export into OUT (`reclaim`): killed
between the two renames, OUT is renamed back from the aside; killed before them, the staging directory
is removed; killed after them, the aside is cleared. An export still running (its host and process
alive) is never touched.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import socket
import stat
import warnings
from pathlib import Path
from typing import Any

from zero_plugins import ZeroError, fsync_path, read_config_text, remove_tree_we_made, write_bytes_no_follow

MARKER = ".zero-export-staging.json"
MANIFEST = "zero_export.json"
_STAGING = re.compile(r"\.zero-export-[0-9a-f]{12}")
_ASIDE = re.compile(r"\.zero-export-[0-9a-f]{12}\.old")


def listed(manifest: Path) -> list[str]:
    """The plain file names an export's list holds; one error if it is not such a list."""
    try:
        files = json.loads(read_config_text(manifest, what="export file list"))["files"]
    except (ZeroError, ValueError, KeyError, TypeError) as error:
        raise ZeroError(f"{manifest} is not an export's file list ({error}); move it away, or choose another "
                        "directory") from None
    if not isinstance(files, list) or not all(isinstance(f, str) and Path(f).name == f and f not in ("", ".", "..")
                                              for f in files):
        raise ZeroError(f"{manifest} is not an export's file list (it must list plain file names); move it away")
    return files


def stage(out: Path) -> Path:
    """Make the staging directory beside `out` (and `out`'s missing parents), MARKER first; one error naming
    the directory where it cannot be made (a read-only location), before anything is read."""
    staging = out.parent / f".zero-export-{secrets.token_hex(6)}"
    marker = {"out": out.name, "aside": f"{staging.name}.old", "host": socket.gethostname(), "pid": os.getpid()}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
    except OSError as error:
        raise ZeroError(f"export OUT {out}: cannot create a directory in {out.parent} ({error.strerror or error}); "
                        "pass a directory you can write to") from None
    try:
        write_bytes_no_follow(staging / MARKER, json.dumps(marker).encode())
    except BaseException:
        os.rmdir(staging)
        raise
    return staging


def publish(staging: Path, out: Path) -> None:
    """Swap the finished `staging` in as `out` (above); `out` keeps what the user added to it."""
    aside = staging.with_name(f"{staging.name}.old")
    ours = _ours(staging / MANIFEST, out / MANIFEST)
    if _is_directory(out):
        os.chmod(staging, stat.S_IMODE(os.lstat(out).st_mode))
        _link_kept(out, staging, ours)
        fsync_path(staging)
        os.rename(out, aside)
    os.rename(staging, out)
    fsync_path(out.parent)
    if _is_directory(aside):
        clear_aside(aside, out)
    os.unlink(out / MARKER)
    fsync_path(out)


def undo(staging: Path, out: Path) -> None:
    """Undo an export that stopped before its staging directory became `out`: OUT back from the aside if
    it was moved there, then the staging directory removed."""
    aside = staging.with_name(f"{staging.name}.old")
    if not os.path.lexists(out) and _is_directory(aside):
        os.rename(aside, out)
    remove_tree_we_made(staging, MARKER)


def reclaim(out: Path) -> None:
    """Undo or finish what exports into `out` that were killed left (module docstring)."""
    if not _is_directory(out.parent):
        return
    for entry in sorted(out.parent.iterdir()):
        marker = _marker(entry / MARKER) if _STAGING.fullmatch(entry.name) else None
        if marker is not None and marker["out"] == out.name and not _running(marker):
            undo(entry, out)
    marker = _marker(out / MARKER)
    if marker is not None and not _running(marker):
        if _is_directory(out.parent / marker["aside"]):
            clear_aside(out.parent / marker["aside"], out)
        os.unlink(out / MARKER)


def clear_aside(aside: Path, out: Path) -> None:
    """Empty and remove the earlier OUT after the swap: delete what an export wrote (either export's list)
    and the names linked into `out`, move into `out` what it lacks; anything else stays, said in a warning."""
    ours = _ours(out / MANIFEST, aside / MANIFEST)
    for entry in sorted(aside.iterdir()):
        mine = os.lstat(entry)
        theirs = _lstat(out / entry.name)
        if entry.name in ours and not stat.S_ISDIR(mine.st_mode):
            os.unlink(entry)  # an export wrote it, or --overwrite replaced it (a link: only the link goes)
        elif theirs is not None and (theirs.st_dev, theirs.st_ino) == (mine.st_dev, mine.st_ino):
            os.unlink(entry)  # its hard link is in `out`
        elif theirs is None:
            os.rename(entry, out / entry.name)  # the user's, moved back whole (a link moves as a link)
    left = sorted(entry.name for entry in aside.iterdir())
    if left:
        warnings.warn(f"export: {aside} (the earlier OUT) still holds {', '.join(left)}, which OUT has under the "
                      "same names; it is kept: move what you need from it, then delete it", stacklevel=2)
        return
    os.rmdir(aside)


def _link_kept(out: Path, staging: Path, ours: set[str]) -> None:
    """Hard-link into `staging` every file of `out` the export keeps, so the swapped-in OUT has it at once.
    A file that cannot be linked (another user's under protected_hardlinks, a filesystem without links) and
    every directory is moved back by clear_aside instead."""
    for entry in out.iterdir():
        if entry.name in ours or entry.name == MARKER or stat.S_ISDIR(os.lstat(entry).st_mode):
            continue
        try:
            os.link(entry, staging / entry.name, follow_symlinks=False)
        except (OSError, NotImplementedError):  # NotImplementedError: no linkat() for links on this platform
            continue


def _ours(*manifests: Path) -> set[str]:
    names = {MANIFEST, MARKER}
    for manifest in manifests:
        if _lstat(manifest) is not None and stat.S_ISREG(os.lstat(manifest).st_mode):
            names.update(listed(manifest))
    return names


def _marker(path: Path) -> dict[str, Any] | None:
    """A MARKER's content, or None where `path` is not one (not a regular file, or not a marker's shape)."""
    info = _lstat(path)
    if info is None or not stat.S_ISREG(info.st_mode):
        return None
    try:
        marker = json.loads(read_config_text(path, what="export staging marker"))
    except (ZeroError, ValueError):
        return None
    if not (isinstance(marker, dict) and isinstance(marker.get("out"), str) and isinstance(marker.get("aside"), str)
            and _ASIDE.fullmatch(marker["aside"]) and isinstance(marker.get("pid"), int)):
        return None
    return marker


def _running(marker: dict[str, Any]) -> bool:
    """Whether the export that wrote `marker` may still be running: its process is alive, or it ran on another
    host (which this one cannot ask)."""
    if marker.get("host") != socket.gethostname():
        return True
    try:
        os.kill(marker["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_directory(path: Path) -> bool:
    info = _lstat(path)
    return info is not None and stat.S_ISDIR(info.st_mode)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
