"""`deepspeed.utils.logger` and `log_dist`, with DeepSpeed's rank rule.

The logger is zero's own ("zero_core"): it adds no handler (a library leaves output to the
program's logging set-up), so warnings reach stderr through logging's last resort and lower
levels appear once the program configures logging.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

import torch.distributed as dist
from zero_plugins import ZeroError

logger = logging.getLogger("zero_core")


def log_dist(message: str, ranks: Sequence[int] | None = None, level: int = logging.INFO) -> None:
    """Log "[Rank R] message" as DeepSpeed does: every process logs before the process group exists (R is -1);
    after, only the ranks listed in `ranks`, or all of them when `ranks` starts with -1 (None or []: none)."""
    started = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if started else -1
    wanted = list(ranks or [])
    if isinstance(ranks, (str, bytes)) or not all(isinstance(r, int) and not isinstance(r, bool) for r in wanted):
        raise ZeroError(f"zero_core.utils.log_dist(ranks={ranks!r}): ranks must be a list of rank numbers "
                        "(ints), or [-1] for every rank")
    if not started or (wanted and (wanted[0] == -1 or rank in wanted)):
        logger.log(level, f"[Rank {rank}] {message}")
