"""Argument checks shared by the CPU optimizers: each error names the argument and the value."""
from __future__ import annotations

import math
from collections.abc import Sequence


def _number(name: str, value: object) -> float:
    # bool is an int, but lr=True is a mistake, not a learning rate of 1.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def check_lr(lr: object) -> None:
    if _number("lr", lr) <= 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")


def check_eps(eps: object) -> None:
    if _number("eps", eps) <= 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")


def check_weight_decay(weight_decay: object) -> None:
    if _number("weight_decay", weight_decay) < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")


def check_betas(betas: object) -> None:
    if not isinstance(betas, Sequence) or len(betas) != 2:
        raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
    for index, beta in enumerate(betas):
        if not 0 <= _number(f"betas[{index}]", beta) < 1:
            raise ValueError(f"betas[{index}] must be in [0, 1), got {beta!r}")
