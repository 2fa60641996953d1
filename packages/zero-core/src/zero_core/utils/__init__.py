"""`deepspeed.utils`'s names that training scripts use: `zero_to_fp32` (full fp32 weights from a checkpoint),
`logger` and `log_dist` (a message from chosen ranks)."""
from . import zero_to_fp32
from ._logging import log_dist, logger

__all__ = ["log_dist", "logger", "zero_to_fp32"]
