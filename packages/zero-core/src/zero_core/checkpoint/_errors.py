"""CheckpointError: a save or a load that could not complete, in words (which tag, which path, why).

A ZeroError, so the `zero` command prints it as one line. A load raises it for a checkpoint whose files are
not what its save wrote (a file changed, cut short or missing, a damaged description or manifest, a data path
outside the tag), naming the file and the way out.

torch.distributed.checkpoint reports a rank's failed write as a CheckpointException, which derives from
BaseException: `except Exception` does not catch it, so a training loop's own handler never sees it. Every
failure of a save reaches the caller as a CheckpointError instead, chained to the raw exception. A full disk
(ENOSPC, EDQUOT) and a file-size limit (EFBIG: RLIMIT_FSIZE or the filesystem's own) are named with the
bytes the save needed and the bytes it had written.
"""
from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

from zero_plugins import ZeroError

_SPACE = {errno.ENOSPC: "the disk is full (ENOSPC)", errno.EDQUOT: "the disk quota is used up (EDQUOT)",
          errno.EFBIG: "a file reached the size limit (EFBIG: ulimit -f / RLIMIT_FSIZE, or the filesystem's "
                       "largest file)"}


class CheckpointError(ZeroError):
    """A checkpoint could not be saved or loaded; the message names the tag, the path and the cause."""


def root_cause(error: BaseException) -> tuple[int | None, BaseException]:
    """The first failed rank and its own exception inside a CheckpointException (DCP gathers every rank's
    failure), else (None, `error`)."""
    failures = getattr(error, "failures", None)
    if isinstance(failures, dict) and failures:
        rank = min(failures)
        wrapped = failures[rank]
        if isinstance(wrapped, tuple) and wrapped and isinstance(wrapped[0], BaseException):
            return rank, wrapped[0]
    return None, error


def save_failed(tag: str, staging: Path, error: BaseException, needed: int) -> CheckpointError:
    """The error a failed save raises: the tag, where it was writing, why, and for a full disk or a size limit
    the bytes needed against the bytes written. `needed` is this rank's bytes."""
    rank, cause = root_cause(error)
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    on = "" if rank is None else f"rank {rank}: "
    space = _out_of_space(cause, staging, needed)
    if space is not None:
        where = getattr(cause, "filename", None) or staging
        said = "" if isinstance(cause, OSError) else f" (torch reported it as {type(cause).__name__}: {text})"
        why = (f"{on}{space} writing {where}: the save needed about {needed:,} bytes on this rank and had written "
               f"{_written(staging):,} in {staging}{said}; free space (or raise the limit) and save again")
    else:
        why = f"{on}{type(cause).__name__}: {text}"
    return CheckpointError(f"save_checkpoint: tag {tag!r} was not saved: {why}. Nothing was published: `latest` "
                           "and the checkpoints already there are as they were")


def _out_of_space(cause: BaseException, staging: Path, needed: int) -> str | None:
    """Why a write failed for lack of room, or None. torch's own serializer reports a short write as a
    RuntimeError ("unexpected pos"), losing the errno, so the limits themselves are looked at too."""
    code = cause.errno if isinstance(cause, OSError) else None
    if code in _SPACE:
        return _SPACE[code]
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and limit < needed:
        return f"a file reached the size limit (EFBIG: ulimit -f / RLIMIT_FSIZE is {limit:,} bytes)"
    try:
        stat = os.statvfs(staging if staging.is_dir() else staging.parent)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    return f"the disk is full (ENOSPC: {free:,} bytes free)" if free < needed else None


def _written(staging: Path) -> int:
    """Bytes in the staging directory's files (best effort: a removed directory is 0)."""
    try:
        return sum(path.lstat().st_size for path in staging.iterdir() if path.is_file() and not path.is_symlink())
    except OSError:
        return 0
