"""Where a checkpoint is written, and how it is published: nothing half-written is ever loadable, and nothing
the save did not make is ever renamed or removed.

A save writes into a staging directory of its own, `<save_dir>/.zero-staging-<run>-<n>` (`run`: 12 hex
digits, one per saving process; `n`: the save's number in it), makes every file durable (DCP fsyncs its
files; the description and the directories are fsynced here), then renames the directory to `<tag>` and
only then moves `latest` (written to `<staging>.latest`, fsynced, renamed). A save killed at any moment
leaves the previous checkpoint and `latest` as they were. One save at a time writes into a save_dir (its
lock, _lock.py), and the next save removes the staging directories that failed ones left, only those their
markers name (_staging.py): another program's `.x.tmp` is never touched.

Replacing an existing tag renames the old one to `.zero-replaced-<run>-<n>` first, so a kill between the
two renames leaves it loadable (`tag_directory` finds it by the tag its description names). An existing
`<tag>` that is not a zero checkpoint is never replaced: the save refuses before anything is written.
"""
from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import shutil
from pathlib import Path

from zero_plugins import ZeroError, read_config_text, refuse_link, write_bytes_no_follow

from ._errors import CheckpointError
from ._manifest import write_manifest
from ._staging import Staging
from ._tags import check_tag

LATEST = "latest"
DESCRIPTION = "zero_checkpoint.json"
_STAGING_PREFIX, _REPLACED_PREFIX = ".zero-staging-", ".zero-replaced-"
_RUN = secrets.token_hex(6)  # this process's saves; another process's leftovers are the only ones cleaned
_OWNED = re.compile(r"\.zero-(staging|replaced)-([0-9a-f]{12})-\d+(\.latest)?")
_SAVES = itertools.count(1)


def check_save_dir(save_dir: Path, tag: str) -> None:
    """(Before anything is written) one error if `save_dir` cannot hold `tag`: a file, or a `<tag>` or `latest`
    that is not zero's to replace."""
    if save_dir.exists() and not save_dir.is_dir():
        raise ZeroError(f"checkpoint directory {save_dir} is a file, not a directory; pass a directory")
    final = save_dir / tag
    # A link is refused before any data is written: publishing renames onto `<tag>`, and a link there would
    # make the rename fail after the data was written, or replace a checkpoint the link points to.
    refuse_link(final, "checkpoint tag path", "move the link away, or pass another tag")
    if final.exists() and not (final / DESCRIPTION).is_file():
        raise ZeroError(f"{final} exists and is not a zero checkpoint, so it is not replaced; "
                        "pass another tag, or move it away")
    latest = save_dir / LATEST
    if latest.exists() and not latest.is_file():
        raise ZeroError(f"{latest} is not a file, so `latest` cannot be written there; move it "
                        "away, or pass save_latest=False")


def prepare(save_dir: Path, tag: str) -> Staging:
    """(Rank 0) check `save_dir`, lock it, remove what failed saves left, and make an empty staging directory;
    its `close()` ends the save (published or not) and releases the lock."""
    check_save_dir(save_dir, tag)
    save_dir.mkdir(parents=True, exist_ok=True)
    return Staging.begin(save_dir, f"{_STAGING_PREFIX}{_RUN}-{next(_SAVES)}", _RUN)


def publish(save_dir: Path, tag: str, staging: Path, save_latest: bool) -> Path:
    """(Rank 0, after every rank has written) rename the staging directory to `tag`, then move `latest`."""
    final = save_dir / tag
    if not (staging / DESCRIPTION).is_file():  # never publish a directory another program emptied
        raise CheckpointError(f"save_checkpoint: {staging} lost its {DESCRIPTION} before it was published as "
                              f"{tag!r} (removed by another program?); nothing was published, save again")
    write_manifest(staging)  # last: it records every file as written
    _fsync(staging)
    check_save_dir(save_dir, tag)  # again: another program may have made `<tag>` while the data was written
    old = None
    if final.exists():
        old = save_dir / f"{_REPLACED_PREFIX}{staging.name.removeprefix(_STAGING_PREFIX)}"
        os.rename(final, old)
    os.rename(staging, final)
    _fsync(save_dir)
    for replaced in [old, *_replaced_copies(save_dir, tag)]:
        if replaced is not None:
            shutil.rmtree(replaced, ignore_errors=True)
    if save_latest:
        pointer = staging.with_name(f"{staging.name}.latest")
        write_durably(pointer, tag)
        os.rename(pointer, save_dir / LATEST)
        _fsync(save_dir)
    return final


def resolve_tag(load_dir: Path, tag: str | None) -> tuple[str, Path]:
    """The tag asked for (or the one `latest` names) and its directory; a missing one is one error listing what is there."""
    if not load_dir.is_dir():
        raise ZeroError(f"no checkpoint to load in {load_dir}: it " + ("is a file, not a directory" if load_dir.exists()
                        else "does not exist") + "; pass the save_dir given to save_checkpoint")
    if tag is None:
        pointer = load_dir / LATEST
        if not pointer.is_file():
            raise ZeroError(f"no checkpoint to load in {load_dir}: it has no `{LATEST}` file; pass tag= "
                            f"(tags there: {', '.join(list_tags(load_dir)) or 'none'})")
        tag = latest_tag(pointer)
    else:
        check_tag(tag, "tag")
    # twice: a save replacing the tag may have removed the old copy between the two looks of the first
    directory = tag_directory(load_dir, tag) or tag_directory(load_dir, tag)
    if directory is None:
        raise ZeroError(f"checkpoint tag {tag!r} is not in {load_dir} (tags there: "
                        f"{', '.join(list_tags(load_dir)) or 'none'})")
    return tag, directory


def latest_tag(pointer: Path) -> str:
    """The tag a `latest` file names, or one error naming the file and the tag rule it breaks."""
    return check_tag(read_latest(pointer), f"the `{LATEST}` file {pointer} names")


def read_latest(pointer: Path) -> str:
    """What a `latest` file names: a short text file (a tag is at most 255 bytes), never read whole when it is not."""
    if not pointer.is_file():
        raise ZeroError(f"{pointer} is not a regular file")
    with open(pointer, "rb") as file:
        content = file.read(1024)
    try:
        return content.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ZeroError(f"{pointer} is not a `latest` file: it is not UTF-8 text") from None


def tag_directory(load_dir: Path, tag: str) -> Path | None:
    """`<load_dir>/<tag>`, or the copy a save killed while replacing it left."""
    if (load_dir / tag).is_dir():
        return load_dir / tag
    return next(iter(_replaced_copies(load_dir, tag)), None)


def _replaced_copies(load_dir: Path, tag: str) -> list[Path]:
    copies = []
    for path in sorted(load_dir.glob(f"{_REPLACED_PREFIX}*")):
        if _OWNED.fullmatch(path.name) and (path / DESCRIPTION).is_file():
            try:
                if json.loads(read_config_text(path / DESCRIPTION)).get("tag") == tag:
                    copies.append(path)
            except (ZeroError, ValueError, AttributeError):
                continue  # a damaged copy is not a tag's copy
    return copies


def list_tags(load_dir: Path) -> list[str]:
    if not load_dir.is_dir():
        return []
    return sorted(p.name for p in load_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def write_durably(path: Path, text: str) -> None:
    """Write a small text file in a directory the save made, never through a link, and fsync it before it is
    renamed or published."""
    write_bytes_no_follow(path, text.encode("utf-8"))


def _fsync(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
