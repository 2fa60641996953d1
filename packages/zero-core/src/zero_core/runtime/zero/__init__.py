"""`deepspeed.runtime.zero`: its `partition_parameters` module (stage 3's names at DeepSpeed's path)."""
from . import partition_parameters

__all__ = ["partition_parameters"]
