"""ZeRO stage 3: partitioned parameters gathered per module (docs/engine.md, "Stage 3").

`zero_core.initialize` builds a stage-3 engine from a config with `zero_optimization.stage: 3`;
`Init` partitions a model while it is built, and `GatheredParameters` gathers parameters
for inspection or in-place changes.
"""
from ._gathered import GatheredParameters
from ._held import HeldParametersWarning
from ._init import Init

__all__ = ["GatheredParameters", "HeldParametersWarning", "Init"]
