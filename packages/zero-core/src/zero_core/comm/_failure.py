"""A collective that failed, in words: which one, where in training, and which peer(s) it waited on."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from zero_plugins import ZeroError

from ._progress import RankProgress


class RankMismatch(ZeroError, RuntimeError):
    """The ranks brought different models or configs (found by initialize's fingerprint, or by Init)."""


class CollectiveFailed(ZeroError, RuntimeError):
    """A collective timed out or lost a peer; the message names the collective, the step and the peer ranks."""


def describe_failure(op: str, progress: RankProgress, error: BaseException) -> str:
    text = str(error)
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    peers = [rank for rank in range(progress.world_size) if rank != progress.rank]
    seen = progress.peers()
    failed = {rank: where for rank, (where, _) in seen.items() if where.startswith("failed")}
    behind = [rank for rank in peers if rank not in seen or seen[rank][0] != progress.where]
    suspects = sorted(failed) or behind or peers
    lines = [_where_rank(rank, seen) for rank in suspects]
    if "timed out" in text.lower() or "timeout" in text.lower():
        what = f"did not complete in time, waiting on rank(s) {suspects}"
    elif any(word in text.lower() for word in ("closed", "reset", "broken pipe", "connection")):
        what = f"lost the connection to rank(s) {suspects} (exited, crashed or was killed)"
    else:
        what = f"failed, waiting on rank(s) {suspects}"
    return (f"rank {progress.rank}: {op} at {progress.where} {what}; " + "; ".join(lines)
            + f" (backend: {first})")


def _where_rank(rank: int, seen: dict[int, tuple[str, float]]) -> str:
    if rank not in seen:
        return f"rank {rank} was never seen"
    where, ago = seen[rank]
    if where.startswith("failed"):
        return f"rank {rank} {where} ({ago:.0f} s ago)"
    return f"rank {rank} was last seen at {where}, {ago:.0f} s ago"


@contextmanager
def guarded(op: str, progress: RankProgress) -> Iterator[None]:
    """Turn the backend's failure of `op` into one CollectiveFailed that says where and on whom it waited."""
    try:
        yield
    except RuntimeError as error:  # DistBackendError, gloo's and NCCL's timeouts and lost connections
        if isinstance(error, ZeroError):
            raise
        raise CollectiveFailed(describe_failure(op, progress, error)) from error
