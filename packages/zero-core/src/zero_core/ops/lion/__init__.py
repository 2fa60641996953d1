"""`deepspeed.ops.lion`: `DeepSpeedCPULion` is zero-offload's CPULion (offload-device registry).

`FusedLion` (DeepSpeed's CUDA kernel) is refused: torch has no fused Lion to run in its place.
"""
from .._cpu_optimizers import cpu_optimizer_names

__all__ = ["DeepSpeedCPULion"]
__getattr__ = cpu_optimizer_names(__name__, {"DeepSpeedCPULion": "lion"}, refused={
    "FusedLion": "torch has no fused Lion kernel to run on the device; use DeepSpeedCPULion with the optimizer "
                 "state offloaded (zero_optimization.offload_optimizer.device: cpu), or a torch.optim optimizer"})
