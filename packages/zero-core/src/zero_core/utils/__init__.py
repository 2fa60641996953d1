"""`deepspeed.utils`'s names that training scripts use: `zero_to_fp32` (full fp32 weights from a checkpoint)."""
from . import zero_to_fp32

__all__ = ["zero_to_fp32"]
