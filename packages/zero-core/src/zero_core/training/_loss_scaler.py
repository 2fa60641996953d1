"""Loss scaling for fp16, with DeepSpeed's semantics and config fields.

The loss is multiplied by the scale before backward so small fp16 gradients do not
underflow; the step divides it out. With dynamic scaling (`fp16.loss_scale: 0`) an
overflow skips the step and halves the scale once `hysteresis` overflows have been seen,
and `loss_scale_window` clean steps in a row double it again.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zero_plugins.ds_config import ZeroConfig

log = logging.getLogger("zero_core.engine")


class LossScaler:
    """A fixed scale (1.0 outside fp16)."""

    dynamic = False

    def __init__(self, scale: float = 1.0) -> None:
        self.cur_scale = float(scale)

    @property
    def scale(self) -> float:
        return self.cur_scale

    def update(self, *, overflow: bool) -> None:
        """A static scale never changes."""

    # What a checkpoint keeps, under DeepSpeed's attribute names.
    STATE: tuple[str, ...] = ("cur_scale",)

    def state_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.STATE}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self.STATE:
            setattr(self, name, state[name])


class DynamicLossScaler(LossScaler):
    dynamic = True
    STATE = ("cur_scale", "cur_hysteresis", "cur_iter", "last_overflow_iter")

    def __init__(self, init_scale: float, scale_window: int, min_scale: float, hysteresis: int, *,
                 consecutive_hysteresis: bool = False, raise_error_at_min_scale: bool = True) -> None:
        super().__init__(init_scale)
        self.scale_factor = 2.0
        self.scale_window = scale_window
        self.min_scale = float(min_scale)
        self.hysteresis = hysteresis
        self.cur_hysteresis = hysteresis
        self.consecutive_hysteresis = consecutive_hysteresis
        self.raise_error_at_min_scale = raise_error_at_min_scale
        self.cur_iter = 0
        self.last_overflow_iter = -1

    def update(self, *, overflow: bool) -> None:
        if overflow:
            if self.hysteresis == 1 or self.cur_hysteresis == 1:
                if self.cur_scale == self.min_scale and self.raise_error_at_min_scale:
                    raise FloatingPointError(
                        f"fp16 gradients overflow even at the minimum loss scale {self.min_scale:g}; "
                        "lower fp16.min_loss_scale, lower the learning rate, or train in bf16"
                    )
                new_scale = max(self.cur_scale / self.scale_factor, self.min_scale)
                log.debug("fp16 overflow: loss scale %g -> %g", self.cur_scale, new_scale)
                self.cur_scale = new_scale
            else:
                log.debug("fp16 overflow: hysteresis %d -> %d", self.cur_hysteresis,
                         self.cur_hysteresis - 1)
                self.cur_hysteresis -= 1
            self.last_overflow_iter = self.cur_iter
        else:
            if self.consecutive_hysteresis:
                self.cur_hysteresis = self.hysteresis
            stable = self.cur_iter - self.last_overflow_iter - 1
            if stable > 0 and stable % self.scale_window == 0:
                if not self.consecutive_hysteresis:
                    self.cur_hysteresis = self.hysteresis
                self.cur_scale *= self.scale_factor
        self.cur_iter += 1



def build_loss_scaler(config: ZeroConfig) -> LossScaler:
    """From a ZeroConfig: dynamic or static for fp16, a no-op scale of 1 otherwise."""
    fp16 = config.fp16
    if not fp16.enabled:
        return LossScaler(1.0)
    if not fp16.dynamic:
        return LossScaler(fp16.loss_scale)
    return DynamicLossScaler(
        init_scale=2.0**fp16.initial_scale_power,
        scale_window=fp16.loss_scale_window,
        min_scale=fp16.min_loss_scale,
        hysteresis=fp16.hysteresis,
        consecutive_hysteresis=fp16.consecutive_hysteresis,
    )
