"""The ZeRO engine for stages 0-2: `initialize`, the engine and its optimizer (docs/engine.md)."""
from ._engine import ZeroEngine
from ._initialize import initialize
from ._layout import FlatLayout, ShardPiece, Slot, split_into_buckets
from ._loss_scaler import DynamicLossScaler, LossScaler
from ._optimizer import ZeroOptimizer
from ._schedulers import WarmupCosineLR, WarmupDecayLR, WarmupLR

__all__ = [
    "DynamicLossScaler",
    "FlatLayout",
    "LossScaler",
    "ShardPiece",
    "Slot",
    "WarmupCosineLR",
    "WarmupDecayLR",
    "WarmupLR",
    "ZeroEngine",
    "ZeroOptimizer",
    "initialize",
    "split_into_buckets",
]
