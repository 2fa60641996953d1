"""`deepspeed.runtime`'s modules that programs import (`runtime.zero.partition_parameters`, `runtime.lr_schedules`)."""
from . import lr_schedules, zero

__all__ = ["lr_schedules", "zero"]
