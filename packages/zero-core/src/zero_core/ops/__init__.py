"""`deepspeed.ops`'s optimizers at DeepSpeed's module paths (`zero_core.ops.adam`, `.adagrad`, `.lion`):
torch's fused or foreach Adam on the device, and zero-offload's CPU optimizers (docs/integrations.md,
"DeepSpeed names")."""
from . import adagrad, adam, lion

__all__ = ["adagrad", "adam", "lion"]
