"""Local multi-rank launching: N spawned ranks with torchrun's environment, a timeout, and the failing rank's traceback."""
from ._local import DEFAULT_TIMEOUT, RanksFailed, free_port, run_ranks, started_ranks

__all__ = ["DEFAULT_TIMEOUT", "RanksFailed", "free_port", "run_ranks", "started_ranks"]
