"""`fp16` and `bf16` blocks (DeepSpeed's precision_config)."""
from __future__ import annotations

from pydantic import Field, field_validator

from ._base import ConfigModel
from ._types import Bool, Int, NonNegFloat

MAX_SCALE_POWER = 64
MAX_LOSS_SCALE = 2.0**64


class FP16Config(ConfigModel):
    """Mixed precision in float16 with loss scaling; `loss_scale: 0` selects dynamic scaling."""

    IGNORED = frozenset({"auto_cast", "fp16_master_weights_and_grads"})
    TRAINER_FILLS = frozenset({"enabled"})

    enabled: Bool = False
    # 0: dynamic. A static scale as large as 1e30 overflows every fp16 gradient and skips every step; 2**64,
    # the same bound as the dynamic scale's start, is far above any that trains.
    loss_scale: NonNegFloat = 0.0
    # The dynamic scale starts at 2**power. 2**64 is finite in fp32 (max ~2**128), and the scaler halves
    # it back to fp16's range in at most 64 skipped steps; 1000 would be inf and skip every step.
    initial_scale_power: Int = Field(default=16, ge=0, le=MAX_SCALE_POWER)
    loss_scale_window: Int = 1000
    # 0 would never let an overflow lower the scale (DeepSpeed's scaler counts down to 1).
    hysteresis: Int = Field(default=2, ge=1)
    consecutive_hysteresis: Bool = False
    min_loss_scale: Int = Field(default=1, le=2**64)

    @field_validator("loss_scale")
    @classmethod
    def _bounded_scale(cls, value: float) -> float:
        if value > MAX_LOSS_SCALE:
            raise ValueError("must be 0 (dynamic scaling) or a static scale of at most 2**64")
        return value

    @property
    def dynamic(self) -> bool:
        return self.loss_scale == 0


class BF16Config(ConfigModel):
    """Mixed precision in bfloat16 (no loss scaling)."""

    IGNORED = frozenset(
        {"immediate_grad_update", "check_grad_overflow", "bf16_master_weights_and_grads", "bf16_optimizer_states"}
    )
    TRAINER_FILLS = frozenset({"enabled"})

    enabled: Bool = False
