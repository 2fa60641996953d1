"""`deepspeed.ops.adam`: `FusedAdam` (torch's Adam/AdamW, fused on CUDA) and `DeepSpeedCPUAdam`
(zero-offload's CPUAdam, found through the offload-device registry on first use)."""
from .._cpu_optimizers import cpu_optimizer_names
from ._fused import FusedAdam

__all__ = ["DeepSpeedCPUAdam", "FusedAdam"]
__getattr__ = cpu_optimizer_names(__name__, {"DeepSpeedCPUAdam": "adam"})
