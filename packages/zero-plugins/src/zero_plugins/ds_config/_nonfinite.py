"""`non_finite_steps` block (zero's own): when a run whose steps keep being skipped should stop.

A step whose gradients hold inf or NaN is skipped on every rank at every precision (docs/reliability.md).
One skipped step is survivable; a run that skips every step trains nothing, so it raises: at the start
(`max_initial`) and at any later point (`max_consecutive`, on by default since a run whose weights became
inf or NaN skips every step from then on).
"""
from __future__ import annotations

from ._base import ConfigModel
from ._types import NonNegInt

# The first optimizer steps all skipped: a run that has not taken one step in this many is broken.
DEFAULT_MAX_INITIAL = 10
# Skipped in a row later on: isolated bad batches skip a step now and then, never ten in a row; a run whose
# weights are no longer finite (e.g. lr 1e30) skips every step.
DEFAULT_MAX_CONSECUTIVE = 10


class NonFiniteStepsConfig(ConfigModel):
    """`max_consecutive`: raise once this many optimizer steps in a row were skipped, at any point of the run
    (0: never; null: 10). `max_initial`: raise if the run's first N optimizer steps were all skipped (0: never;
    null: 10). With fp16's dynamic loss scaling both defaults are off: the scaler halves the scale on each
    overflow, so overflows in a row are expected while it comes down, and it raises once the scale is at
    `min_loss_scale` and the gradients still overflow, which ends a run that skips every step."""

    max_consecutive: NonNegInt | None = None
    max_initial: NonNegInt | None = None

    def consecutive_limit(self, dynamic_loss_scale: bool) -> int:
        """The resolved `max_consecutive` (0: never)."""
        return _resolved(self.max_consecutive, DEFAULT_MAX_CONSECUTIVE, dynamic_loss_scale)

    def initial_limit(self, dynamic_loss_scale: bool) -> int:
        """The resolved `max_initial` (0: never)."""
        return _resolved(self.max_initial, DEFAULT_MAX_INITIAL, dynamic_loss_scale)


def _resolved(given: int | None, default: int, dynamic_loss_scale: bool) -> int:
    if given is not None:
        return given
    return 0 if dynamic_loss_scale else default
