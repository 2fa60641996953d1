"""The training loop's pieces the engine assembles beside the sharded state: LR schedulers, the loss scaler and
the data loader (docs/architecture.md). Nothing here knows how state is sharded or placed."""
from ._dataloader import build_dataloader
from ._loss_scaler import DynamicLossScaler, LossScaler, build_loss_scaler
from ._schedulers import ScheduleWarning, WarmupCosineLR, WarmupDecayLR, WarmupLR, build_scheduler, resolve_scheduler

__all__ = ["DynamicLossScaler", "LossScaler", "ScheduleWarning", "WarmupCosineLR", "WarmupDecayLR", "WarmupLR", "build_dataloader",
           "build_loss_scaler", "build_scheduler", "resolve_scheduler"]
