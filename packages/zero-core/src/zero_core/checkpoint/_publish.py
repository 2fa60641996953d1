"""Where a checkpoint is written, and how it is published: nothing half-written is ever loadable.

A save writes into `<save_dir>/.<tag>.tmp`, makes every file durable (DCP fsyncs its files;
the description and the directories are fsynced here), then renames the directory to
`<tag>` and only then moves `latest` (written to a temporary name, fsynced, renamed). A save
killed at any moment leaves the previous checkpoint and `latest` as they were; its
temporary directory is removed by the next save. Replacing an existing tag renames the old
one to `.<tag>.old` first, so a kill between the two renames leaves it loadable under that
name (`tag_directory` finds it).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from zero_plugins import ZeroError

LATEST = "latest"


def staging_directory(save_dir: Path, tag: str) -> Path:
    return save_dir / f".{tag}.tmp"


def prepare(save_dir: Path, tag: str) -> Path:
    """(Rank 0) an empty staging directory for `tag`, removing what a killed save left."""
    save_dir.mkdir(parents=True, exist_ok=True)
    for leftover in save_dir.glob(".*.tmp"):
        shutil.rmtree(leftover, ignore_errors=True)
    staging = staging_directory(save_dir, tag)
    staging.mkdir()
    return staging


def publish(save_dir: Path, tag: str, save_latest: bool) -> Path:
    """(Rank 0, after every rank has written) rename the staging directory to `tag`, then move `latest`."""
    staging, final, old = staging_directory(save_dir, tag), save_dir / tag, save_dir / f".{tag}.old"
    _fsync(staging)
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(staging, final)
    _fsync(save_dir)
    shutil.rmtree(old, ignore_errors=True)
    if save_latest:
        pointer = save_dir / f".{LATEST}.tmp"
        write_durably(pointer, tag)
        os.rename(pointer, save_dir / LATEST)
        _fsync(save_dir)
    return final


def resolve_tag(load_dir: Path, tag: str | None) -> tuple[str, Path]:
    """The tag asked for (or the one `latest` names) and its directory; a missing one is one error listing what is there."""
    if tag is None:
        pointer = load_dir / LATEST
        if not pointer.is_file():
            raise ZeroError(f"no checkpoint to load in {load_dir}: it has no `{LATEST}` file; pass tag= "
                            f"(tags there: {', '.join(list_tags(load_dir)) or 'none'})")
        tag = pointer.read_text(encoding="utf-8").strip()
    directory = tag_directory(load_dir, tag)
    if directory is None:
        raise ZeroError(f"checkpoint tag {tag!r} is not in {load_dir} (tags there: "
                        f"{', '.join(list_tags(load_dir)) or 'none'})")
    return tag, directory


def tag_directory(load_dir: Path, tag: str) -> Path | None:
    for candidate in (load_dir / tag, load_dir / f".{tag}.old"):
        if candidate.is_dir():
            return candidate
    return None


def list_tags(load_dir: Path) -> list[str]:
    if not load_dir.is_dir():
        return []
    return sorted(p.name for p in load_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def write_durably(path: Path, text: str) -> None:
    """Write a small text file and fsync it before it is renamed or published."""
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())


def _fsync(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
