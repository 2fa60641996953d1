"""`non_finite_steps` block (zero's own): when a run whose steps keep being skipped should stop.

A step whose gradients hold inf or NaN is skipped on every rank at every precision (docs/reliability.md).
One skipped step is survivable; a run that skips every step trains nothing, so it raises.
"""
from __future__ import annotations

from ._base import ConfigModel
from ._types import NonNegInt, PositiveInt

# The first optimizer steps all skipped: a run that has not taken one step in this many is broken.
DEFAULT_MAX_INITIAL = 10


class NonFiniteStepsConfig(ConfigModel):
    """`max_consecutive`: raise once this many optimizer steps in a row were skipped (null: never).
    `max_initial`: raise if the run's first N optimizer steps were all skipped (0: never; null: 10, except
    fp16 with dynamic loss scaling, which halves the scale on each overflow and raises at `min_loss_scale`)."""

    max_consecutive: PositiveInt | None = None
    max_initial: NonNegInt | None = None

    def initial_limit(self, dynamic_loss_scale: bool) -> int:
        """The resolved `max_initial` (0: never)."""
        if self.max_initial is not None:
            return self.max_initial
        return 0 if dynamic_loss_scale else DEFAULT_MAX_INITIAL
