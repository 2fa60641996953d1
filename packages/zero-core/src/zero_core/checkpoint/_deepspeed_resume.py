"""engine.load_checkpoint on a DeepSpeed checkpoint: rank 0 imports it once, then every rank loads the import.

`deepspeed_as_zero(load_dir, tag)` is the hook load_checkpoint calls first: for a zero
checkpoint it returns its arguments unchanged; for a DeepSpeed tag directory (its model
states file there, no zero description) rank 0 converts it into
`<load_dir>/.zero-from-deepspeed/<tag>` (a temporary directory where load_dir is read-only,
which then must be visible to every rank: one node), every rank waits, and the
(save directory, tag) of the conversion come back. An import newer than the DeepSpeed
files it came from is reused.
"""
from __future__ import annotations

import errno
import tempfile
from pathlib import Path

import torch.distributed as dist
from zero_plugins import ZeroError

from ._publish import DESCRIPTION
from ._deepspeed import import_deepspeed_checkpoint
from ._deepspeed_read import is_deepspeed_checkpoint
from ._publish import LATEST, read_latest
from ._tags import tag_problem

CONVERTED = ".zero-from-deepspeed"


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
    imported, detail = outcome[0]
    if not imported:
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


def _imported(directory: Path, tag: str, trust_checkpoint: bool) -> Path:
    """(Rank 0) the save directory holding the import of `directory` as `tag`, converting it unless already done."""
    newest = max(path.stat().st_mtime for path in directory.iterdir() if path.is_file())
    save_dir = directory.parent / CONVERTED
    done = save_dir / tag / DESCRIPTION
    if done.is_file() and done.stat().st_mtime >= newest:
        return save_dir
    try:
        import_deepspeed_checkpoint(directory, save_dir, tag, save_latest=False, trust_checkpoint=trust_checkpoint)
    except OSError as error:
        if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        save_dir = Path(tempfile.mkdtemp(prefix="zero-from-deepspeed-"))
        import_deepspeed_checkpoint(directory, save_dir, tag, save_latest=False, trust_checkpoint=trust_checkpoint)
    return save_dir
