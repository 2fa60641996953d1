"""The ZeRO engine for every stage: `initialize`, the assembler and the engine (docs/engine.md).

The building blocks the stages share (zero_core.sharding) and the training loop's pieces
(zero_core.training) are re-exported for users of this module's earlier names.
"""
from ..sharding import FlatLayout, ShardPiece, Slot, ZeroOptimizer, split_into_buckets
from ..training import DynamicLossScaler, LossScaler, WarmupCosineLR, WarmupDecayLR, WarmupLR
from ._arguments import add_config_arguments
from ._assemble import assemble_engine
from ._engine import EngineParts, ZeroEngine
from ._initialize import initialize
from ..comm import RankMismatch
from ._skips import NonFiniteStepsError
from ._usage import EngineMisuse
from ._whole_step import HalfAppliedStep

# DeepSpeed's name for the engine: accelerate and transformers test `isinstance(model, deepspeed.DeepSpeedEngine)`
DeepSpeedEngine = ZeroEngine

__all__ = [
    "add_config_arguments",
    "DeepSpeedEngine",
    "DynamicLossScaler",
    "EngineMisuse",
    "EngineParts",
    "HalfAppliedStep",
    "FlatLayout",
    "LossScaler",
    "NonFiniteStepsError",
    "RankMismatch",
    "ShardPiece",
    "Slot",
    "WarmupCosineLR",
    "WarmupDecayLR",
    "WarmupLR",
    "ZeroEngine",
    "ZeroOptimizer",
    "assemble_engine",
    "initialize",
    "split_into_buckets",
]
