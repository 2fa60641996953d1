"""engine.load_checkpoint on a DeepSpeed checkpoint: rank 0 imports it once, then every rank loads the import.

`deepspeed_as_zero(load_dir, tag)` is the hook load_checkpoint calls first: for a zero checkpoint it
returns its arguments unchanged; for a DeepSpeed tag directory (its model states file there, no zero
description) rank 0 converts it, every rank waits, and the (save directory, tag) of the conversion
come back.

A conversion is keyed by the content of the DeepSpeed files (each one's name, size and blake2b hash),
never by times: `cp -p` and `rsync -a` keep a changed file's mtime older than an old conversion, which
was then reused. It lives in `<load_dir>/.zero-from-deepspeed/<key>/<tag>`; where load_dir is read-only,
in one cache directory, `$ZERO_DEEPSPEED_CACHE` or `$XDG_CACHE_HOME/zero/deepspeed-conversions`
(`~/.cache/...`), which every rank must see (one node). Either is reused while the files are the same.
Conversions of the same tag under another key (stale) are removed from `.zero-from-deepspeed`, and the
cache keeps the `CACHE_KEEP` most recently used; only directories named like a key and holding a
zero checkpoint are ever removed.
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
from pathlib import Path

import torch.distributed as dist
from zero_plugins import ZeroError

from ._deepspeed import import_deepspeed_checkpoint
from ._deepspeed_read import is_deepspeed_checkpoint
from ._manifest import digests
from ._publish import DESCRIPTION, LATEST, read_latest
from ._tags import tag_problem

CONVERTED = ".zero-from-deepspeed"
CACHE_ENV = "ZERO_DEEPSPEED_CACHE"
CACHE_KEEP = 3  # conversions kept in the cache: each is a copy of a whole training state
_KEY = re.compile(r"[0-9a-f]{32}")


def deepspeed_as_zero(load_dir: Path, tag: str | None, trust_checkpoint: bool) -> tuple[Path, str | None]:
    """The (load_dir, tag) to load: these, or for a DeepSpeed checkpoint those of its import (every rank calls it)."""
    located = _locate(load_dir, tag)
    if located is None:
        return load_dir, tag
    directory, tag = located
    outcome: list[tuple[bool, str]] = [(False, "rank 0 did not answer")]
    if not dist.is_initialized() or dist.get_rank() == 0:
        try:
            outcome[0] = (True, str(_imported(directory, tag, trust_checkpoint)))
        except (ZeroError, OSError) as error:
            outcome[0] = (False, str(error))
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(outcome, src=0)  # also the barrier: no rank reads before rank 0 has written
    done, detail = outcome[0]
    if not done:
        raise ZeroError(f"importing the DeepSpeed checkpoint {directory} failed (on rank 0): {detail}")
    return Path(detail), tag


def _locate(load_dir: Path, tag: str | None) -> tuple[Path, str] | None:
    """The DeepSpeed tag directory and tag that (load_dir, tag) name, or None for anything else."""
    if tag is None:
        if is_deepspeed_checkpoint(load_dir):
            return load_dir, load_dir.name
        pointer = load_dir / LATEST
        if not pointer.is_file():
            return None
        tag = read_latest(pointer)
    if tag_problem(tag) is not None:
        return None  # not a name: resolve_tag says why, for zero's and DeepSpeed's checkpoints alike
    directory = load_dir / tag
    return (directory, tag) if is_deepspeed_checkpoint(directory) else None


def content_key(directory: Path) -> str:
    """32 hex digits naming the DeepSpeed tag directory's files: their names, sizes and blake2b hashes."""
    names = sorted(entry.name for entry in os.scandir(directory) if entry.is_file())
    hasher = hashlib.blake2b(digest_size=16)
    # Links followed: DeepSpeed's reader reads through them, so their targets' bytes are what is converted.
    for name, record in zip(names, digests([(directory / name).resolve() for name in names])):
        hasher.update(f"{name}\0{record.size}\0{record.blake2b}\n".encode())
    return hasher.hexdigest()


def cache_directory() -> Path:
    """Where conversions of read-only DeepSpeed checkpoints live: $ZERO_DEEPSPEED_CACHE, or under the XDG cache."""
    configured = os.environ.get(CACHE_ENV)
    if configured is not None:
        if not os.path.isabs(configured):
            raise ZeroError(f"{CACHE_ENV}={configured!r} is not an absolute path; set it to the directory where "
                            "conversions of read-only DeepSpeed checkpoints are kept, or unset it")
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "zero" / "deepspeed-conversions"


def _imported(directory: Path, tag: str, trust_checkpoint: bool) -> Path:
    """(Rank 0) the save directory holding the import of `directory` as `tag`, converting it unless already done."""
    key = content_key(directory)
    local, cache = directory.parent / CONVERTED, cache_directory()
    if (local / key / tag / DESCRIPTION).is_file():
        return local / key
    if (cache / key / tag / DESCRIPTION).is_file():
        _prune(cache, key, tag, in_cache=True)
        return cache / key
    try:
        import_deepspeed_checkpoint(directory, local / key, tag, save_latest=False, trust_checkpoint=trust_checkpoint)
    except OSError as error:
        if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        if cache.exists() and not cache.is_dir():
            raise ZeroError(f"{cache} (the cache of DeepSpeed conversions: {CACHE_ENV}) is not a directory; set "
                            f"{CACHE_ENV} to a directory") from None
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)  # conversions hold a model's weights: private
        import_deepspeed_checkpoint(directory, cache / key, tag, save_latest=False, trust_checkpoint=trust_checkpoint)
        _prune(cache, key, tag, in_cache=True)
        return cache / key
    _prune(local, key, tag, in_cache=False)
    return local / key


def _prune(base: Path, key: str, tag: str, in_cache: bool) -> None:
    """Remove stale conversions of `tag` (beside the DeepSpeed checkpoint) or, in the cache, mark `key` used and
    remove all but the CACHE_KEEP most recently used. Only key-named real directories holding a zero checkpoint go."""
    if in_cache:
        os.utime(base / key)
    entries = [entry for entry in os.scandir(base) if _KEY.fullmatch(entry.name) and entry.name != key
               and entry.is_dir(follow_symlinks=False) and any(Path(entry.path).glob(f"*/{DESCRIPTION}"))]
    if not in_cache:
        stale = [entry for entry in entries if (Path(entry.path) / tag / DESCRIPTION).is_file()]
    else:
        entries.sort(key=lambda entry: entry.stat(follow_symlinks=False).st_mtime, reverse=True)
        stale = entries[CACHE_KEEP - 1:]
    for entry in stale:
        shutil.rmtree(entry.path, ignore_errors=True)
