"""What the Trainer's loop holds of the engine: its optimizer and LR scheduler as views, and an engine that only evaluates.

The engine steps the optimizer and the LR scheduler inside its own `step()`, at the accumulation boundary, so
the loop's `optimizer.step()` and `lr_scheduler.step()` do nothing (accelerate's DeepSpeed wrappers do the same).
"""
from __future__ import annotations

from typing import Any

import torch

from ...engine import ZeroEngine
from ...sharding import ZeroOptimizer


class EngineOptimizer:
    """The Trainer's `optimizer`: the engine's param groups, stepped by the engine.

    Not a torch Optimizer, so accelerate's `prepare()` hands it back as it is (no AcceleratedOptimizer, and no
    step of it is ever counted as skipped: the engine skips the LR scheduler's step itself on overflow).
    """

    def __init__(self, optimizer: ZeroOptimizer) -> None:
        self.optimizer = optimizer

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def step(self, closure: Any = None) -> None:
        """Nothing: the engine stepped at the accumulation boundary, in the micro-batch's backward."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing: the engine's step frees the gradients."""


class EngineScheduler:
    """The Trainer's `lr_scheduler`: the engine steps the real one. `get_last_lr()` is the rate the latest optimizer
    step used, which the stock Trainer logs (it reads the rate before stepping its scheduler)."""

    def __init__(self, engine: ZeroEngine) -> None:
        self.engine = engine
        self._rates: list[float] | None = None

    def note_step(self) -> None:
        """Called just before the engine's optimizer step: the rates that step uses."""
        self._rates = self.engine.get_lr()

    def get_last_lr(self) -> list[float]:
        return self._rates if self._rates is not None else self.engine.get_lr()

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Nothing: the engine steps the scheduler after each applied optimizer step."""


def evaluation_config(config: dict[str, Any], model: torch.nn.Module) -> dict[str, Any]:
    """The config of an engine built only to evaluate (evaluate/predict/save_model before train()).

    No optimizer or scheduler block: it never steps. 16-bit compute only if the weights are 16-bit already: the
    engine casts the weights it is given, and train() builds its engine from them afterwards, so a bf16 evaluation
    would round the fp32 weights training starts from (DeepSpeed's Trainer does round them).
    """
    kept = {key: value for key, value in config.items() if key not in ("optimizer", "scheduler")}
    if any(param.dtype == torch.float32 for param in model.parameters()):
        for block in ("fp16", "bf16"):
            if isinstance(kept.get(block), dict):
                kept[block] = {**kept[block], "enabled": False}
    return kept
