"""`fp16` and `bf16` blocks (DeepSpeed's precision_config)."""
from __future__ import annotations

from pydantic import Field

from ._base import ConfigModel
from ._types import Bool, Int, NonNegFloat


class FP16Config(ConfigModel):
    """Mixed precision in float16 with loss scaling; `loss_scale: 0` selects dynamic scaling."""

    IGNORED = frozenset({"auto_cast", "fp16_master_weights_and_grads"})

    enabled: Bool = False
    loss_scale: NonNegFloat = 0.0
    initial_scale_power: Int = 16
    loss_scale_window: Int = 1000
    # 0 would never let an overflow lower the scale (DeepSpeed's scaler counts down to 1).
    hysteresis: Int = Field(default=2, ge=1)
    consecutive_hysteresis: Bool = False
    min_loss_scale: Int = 1

    @property
    def dynamic(self) -> bool:
        return self.loss_scale == 0


class BF16Config(ConfigModel):
    """Mixed precision in bfloat16 (no loss scaling)."""

    IGNORED = frozenset(
        {"immediate_grad_update", "check_grad_overflow", "bf16_master_weights_and_grads", "bf16_optimizer_states"}
    )

    enabled: Bool = False
