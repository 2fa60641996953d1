"""ZeRO stage 3: partitioned parameters gathered per module (docs/engine.md, "Stage 3").

`zero_core.initialize` assembles a stage-3 engine from `build_stage3_state` when the config
says `zero_optimization.stage: 3`; `Init` partitions a model while it is built, and
`GatheredParameters` gathers parameters for inspection or in-place changes.
"""
from ._build import build_stage3_state
from ._coordinator import GatherCoordinator, PassKind
from ._external import register_external_parameter
from ._gathered import GatheredParameters
from ._held import HeldParametersWarning
from ._init import Init
from ._live_cap import LiveCapWarning
from ._param_status import ZeroParamStatus
from ._partition import Partition
from ._passes import GatheringPasses
from ._unit import ParamUnit, UnitState, unit_of

__all__ = [
    "GatherCoordinator",
    "GatheredParameters",
    "GatheringPasses",
    "HeldParametersWarning",
    "Init",
    "LiveCapWarning",
    "ParamUnit",
    "Partition",
    "PassKind",
    "UnitState",
    "ZeroParamStatus",
    "build_stage3_state",
    "register_external_parameter",
    "unit_of",
]
