"""`deepspeed.zero`'s names for scripts that `import zero_core as deepspeed`: `Init`, `GatheredParameters` and
`register_external_parameter` (stage 3, docs/engine.md)."""
from ..stage3 import GatheredParameters, Init, register_external_parameter

__all__ = ["GatheredParameters", "Init", "register_external_parameter"]
