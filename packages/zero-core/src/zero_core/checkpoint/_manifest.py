"""The checkpoint's manifest (`zero_manifest.json`): every file of a tag, its size and its blake2b hash.

Written by `publish` into the staging directory after every other file is durable, so it records the
bytes the save wrote; readers check it before a weight is used (_verify.py) and name the first file
that differs. Sizes catch a copy cut short, hashes a value changed in place (same size, other bytes),
which DCP's metadata cannot see. A tag saved before manifests existed has none: it loads unverified.

The files are re-read to hash them (in threads: hashlib releases the GIL) rather than hashed while DCP
writes them: DCP's writer has no public hook for that, and the re-read comes from the page cache the
write just filled (bench/checkpoint_verify.py measures what it costs).
"""
from __future__ import annotations

import enum
import hashlib
import json
import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from zero_plugins import ZeroError, read_config_text

MANIFEST = "zero_manifest.json"
MANIFEST_FORMAT = 1
_CHUNK = 8 << 20  # bytes hashed per read: large enough that hashlib runs without the GIL, small enough to stream
_THREADS = 4
_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


class Integrity(str, enum.Enum):
    """What a tag's manifest says of its files."""

    VERIFIED = "verified"  # every file has the size and hash recorded at save
    UNVERIFIED = "unverified"  # no manifest: saved by a zero older than manifests
    DAMAGED = "damaged"  # a file differs, is missing, or the manifest itself is damaged


class ManifestDamaged(ValueError):
    """The manifest itself cannot be used; the message is the problem line (the caller names the checkpoint)."""


@dataclass(frozen=True)
class FileRecord:
    size: int
    blake2b: str


def digest(path: Path) -> FileRecord:
    """The size and blake2b hash of the regular file `path`; a link is refused (a save writes none)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ZeroError(f"{path} is not a regular file")
        hasher = hashlib.blake2b()
        size = 0
        with open(fd, "rb", buffering=0, closefd=False) as file:
            while chunk := file.read(_CHUNK):
                hasher.update(chunk)
                size += len(chunk)
    finally:
        os.close(fd)
    return FileRecord(size, hasher.hexdigest())


def in_threads(function: Callable[[_Item], _Result], items: list[_Item]) -> list[_Result]:
    """`function` over `items` on a few threads (hashlib lets go of the GIL), or in this thread once the
    interpreter is shutting down: an asynchronous save finished by the exit hook publishes after Python has
    stopped its executors (and on 3.12, stopped starting threads)."""
    try:
        with ThreadPoolExecutor(max_workers=_THREADS) as pool:
            return list(pool.map(function, items))
    except RuntimeError as error:
        if "shutdown" not in str(error):
            raise
    return [function(item) for item in items]


def digests(paths: list[Path]) -> list[FileRecord]:
    """The record of each of `paths`, hashed in threads."""
    return in_threads(digest, paths)


def write_manifest(directory: Path) -> None:
    """(At publish, rank 0) record every file of `directory` in its manifest, written and fsynced."""
    names = sorted(entry.name for entry in os.scandir(directory) if entry.name != MANIFEST)
    records = dict(zip(names, digests([directory / name for name in names])))
    text = json.dumps({"format": MANIFEST_FORMAT, "hash": "blake2b",
                       "files": {name: {"bytes": r.size, "blake2b": r.blake2b} for name, r in records.items()}},
                      indent=1)
    # A new file, never through a link: the staging directory is the save's own.
    fd = os.open(directory / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with open(fd, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())


def read_manifest(directory: Path) -> dict[str, FileRecord] | None:
    """The files a tag's manifest records, or None when it has none; ManifestDamaged when it cannot be used."""
    path = directory / MANIFEST
    if not os.path.lexists(path):
        return None
    try:
        data: Any = json.loads(read_config_text(path, what="checkpoint manifest"))
    except ZeroError as error:
        raise _damaged_manifest(path, str(error)) from None
    except ValueError as error:
        raise _damaged_manifest(path, f"it is not valid JSON: {error}") from None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or data.get("hash") != "blake2b":
        raise _damaged_manifest(path, f"it is not a format-{MANIFEST_FORMAT} blake2b manifest")
    files = data.get("files")
    if not isinstance(files, dict) or not files:
        raise _damaged_manifest(path, "`files` is not an object naming the tag's files")
    records = {}
    for name, record in files.items():
        if name in ("", ".", "..") or "/" in name or "\\" in name or name == MANIFEST:
            raise _damaged_manifest(path, f"it lists {name!r}, which is not a file name of the tag")
        size = record.get("bytes") if isinstance(record, dict) else None
        hashed = record.get("blake2b") if isinstance(record, dict) else None
        if type(size) is not int or size < 0 or not isinstance(hashed, str) or len(hashed) != 128:
            raise _damaged_manifest(path, f"the entry of {name} is not {{\"bytes\": <size>, \"blake2b\": <hash>}}")
        records[name] = FileRecord(size, hashed)
    return records


def manifest_problems(directory: Path, records: dict[str, FileRecord], names: list[str]) -> list[str]:
    """A line for each of `names` (files the manifest records) that is missing or differs from its record."""
    def problem(name: str) -> str | None:
        expected, path = records[name], directory / name
        if not os.path.lexists(path):
            return f"{name} is missing (the manifest {MANIFEST} records it)"
        try:
            found = digest(path)
        except OSError as error:
            if os.path.islink(path):
                return f"{name} is a symbolic link, not the file the save wrote"
            return f"{name} cannot be read ({error.strerror or error})"
        except ZeroError:
            return f"{name} is not a regular file"
        if found.size != expected.size:
            return f"{name} is {found.size} bytes, {MANIFEST} records {expected.size} (the file was cut short or replaced)"
        if found.blake2b != expected.blake2b:
            return (f"{name} does not match its blake2b hash in {MANIFEST} (same size, other bytes: it changed "
                    "after the save)")
        return None

    return [line for line in in_threads(problem, names) if line is not None]


def _damaged_manifest(path: Path, detail: str) -> ManifestDamaged:
    return ManifestDamaged(f"its manifest {path.name} cannot be used ({detail})")
