"""`deepspeed.ops.adagrad`: `DeepSpeedCPUAdagrad` is zero-offload's CPUAdagrad (offload-device registry)."""
from .._cpu_optimizers import cpu_optimizer_names

__all__ = ["DeepSpeedCPUAdagrad"]
__getattr__ = cpu_optimizer_names(__name__, {"DeepSpeedCPUAdagrad": "adagrad"})
