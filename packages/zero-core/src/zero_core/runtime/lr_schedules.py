"""`deepspeed.runtime.lr_schedules`: the schedulers zero implements, at DeepSpeed's path.

accelerate passes a scheduler to `initialize` as the engine's own when its class name is in
VALID_LR_SCHEDULES, so the list holds exactly the schedules zero has (DeepSpeed's LRRangeTest and
OneCycle are not among them: the config's `scheduler.type` names them in its error).
"""
from ..training import WarmupCosineLR, WarmupDecayLR, WarmupLR

VALID_LR_SCHEDULES = [WarmupLR.__name__, WarmupDecayLR.__name__, WarmupCosineLR.__name__]

__all__ = ["VALID_LR_SCHEDULES", "WarmupCosineLR", "WarmupDecayLR", "WarmupLR"]
