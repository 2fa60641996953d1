"""`deepspeed.runtime`'s modules that programs import (`runtime.zero.partition_parameters`)."""
from . import zero

__all__ = ["zero"]
