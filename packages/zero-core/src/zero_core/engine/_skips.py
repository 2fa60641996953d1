"""Steps skipped for non-finite gradients: said (a rate-limited WARNING with the running count), counted,
and stopped when the run keeps skipping (the `non_finite_steps` block; docs/reliability.md)."""
from __future__ import annotations

import logging

from zero_plugins import ZeroError

log = logging.getLogger("zero_core.engine")


class NonFiniteStepsError(ZeroError, FloatingPointError):
    """The run keeps skipping its optimizer steps: its gradients are inf or NaN step after step."""


class SkippedSteps:
    """Counts skipped and applied optimizer steps and says so; raises past the configured limits (0: never)."""

    def __init__(self, max_consecutive: int, max_initial: int) -> None:
        self.max_consecutive = max_consecutive
        self.max_initial = max_initial
        self.skipped = 0
        self.consecutive = 0
        self.applied = 0

    def record_applied(self) -> None:
        self.applied += 1
        self.consecutive = 0

    def record_skipped(self, step: int, scale_change: str = "") -> None:
        """One skipped step (`step`: the optimizer step's number, from 1); `scale_change` e.g. "loss scale 4 -> 2"."""
        self.skipped += 1
        self.consecutive += 1
        what = (f"step {step}: gradients are non-finite (inf or NaN); the optimizer step was skipped on every "
                f"rank, weights were not updated{', ' + scale_change if scale_change else ''} "
                f"({self.skipped} skipped so far, {self.consecutive} in a row)")
        # The start of the run first: "none could be applied" says more than "N in a row" when both hold.
        if self.applied == 0 and self.max_initial and self.skipped >= self.max_initial:
            raise NonFiniteStepsError(f"{what}: none of the first {self.max_initial} steps could be applied "
                                      "(non_finite_steps.max_initial); check the data, the loss, the learning rate "
                                      "and the fp16 loss scale")
        if self.max_consecutive and self.consecutive >= self.max_consecutive:
            raise NonFiniteStepsError(f"{what}: non_finite_steps.max_consecutive is {self.max_consecutive}; the "
                                      "weights or the data may no longer be finite: check the data and the loss, "
                                      "lower the learning rate, or raise the limit (0: never stop)")
        if self.skipped & (self.skipped - 1) == 0:  # the 1st, 2nd, 4th, 8th, ... skip: said without flooding the log
            log.warning(what)
