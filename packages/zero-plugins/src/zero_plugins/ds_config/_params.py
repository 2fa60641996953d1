"""The values in `optimizer.params` and `scheduler.params`, checked at load time.

The blocks are keyword arguments of a constructor, so their names are checked where the engine
builds the optimizer or the schedule (it knows the class). Their values are checked here, by
name, whatever the type: a string `lr`, `"lr": Infinity` or `"betas": 0.9` would otherwise reach
torch, which takes some of them without a word and turns every weight into NaN.
Whole numbers written as floats (`"warmup_num_steps": 1e3`) become ints, as for the other keys.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

from ._errors import ConfigError, show
from ._types import MAX_INT

Check = Callable[[str, Any], Any]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite(value: int | float) -> bool:
    # math.isfinite raises OverflowError on an int beyond a float's range (10**400): it is not finite as a float.
    return math.isfinite(value) if isinstance(value, float) else abs(value) <= sys.float_info.max


def _fail(path: str, must: str, value: Any) -> ConfigError:
    return ConfigError(path, f"{must} (got {show(value)})")


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False,
           high_open: bool = False) -> Check:
    """A finite JSON number within [low, high] (an open end excludes the bound)."""
    left, right = "(" if low_open else "[", ")" if high_open else "]"
    if low is not None and high is not None:
        must = f"must be a number in {left}{_plain(low)}, {_plain(high)}{right}"
    elif low is not None:
        must = f"must be a finite number {'>' if low_open else '>='} {_plain(low)}"
    else:
        must = "must be a finite number"

    def check(path: str, value: Any) -> Any:
        if not _is_number(value) or not _is_finite(value):
            raise _fail(path, must, value)
        if low is not None and (value < low or (low_open and value == low)):
            raise _fail(path, must, value)
        if high is not None and (value > high or (high_open and value == high)):
            raise _fail(path, must, value)
        return value

    return check


def integer(low: int, high: int = MAX_INT, *, must: str = "") -> Check:
    """A whole JSON number in [low, high]; 1e3 is read as 1000."""
    if not must:
        must = f"must be a whole number from {low} to {high}" if high != MAX_INT else f"must be a whole number >= {low}"

    def check(path: str, value: Any) -> Any:
        if not _is_number(value) or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
            raise _fail(path, must, value)
        if not low <= value <= high:
            raise _fail(path, must, value)
        return int(value)

    return check


def boolean(*, nullable: bool = False) -> Check:
    must = "must be true, false or null" if nullable else "must be true or false"

    def check(path: str, value: Any) -> Any:
        if isinstance(value, bool) or (nullable and value is None):
            return value
        raise _fail(path, must, value)

    return check


def one_of(*choices: str | None) -> Check:
    # 'log', as the engine's own checks spell the names.
    must = "must be " + " or ".join("null" if c is None else f"'{c}'" for c in choices)

    def check(path: str, value: Any) -> Any:
        if value in choices and (value is None or isinstance(value, str)):
            return value
        raise _fail(path, must, value)

    return check


def sequence(length: int, item: Check, must: str, *, rule: Callable[[list[Any]], bool] | None = None) -> Check:
    """A JSON array of `length` items, each passing `item`, together passing `rule`."""

    def check(path: str, value: Any) -> Any:
        if not isinstance(value, (list, tuple)) or len(value) != length:
            raise _fail(path, must, value)
        items = [item(f"{path}[{i}]", v) for i, v in enumerate(value)]
        if rule is not None and not rule(items):
            raise _fail(path, must, value)
        return items

    return check


def number_or_list(check_one: Check, must: str) -> Check:
    """One value for every param group, or a non-empty array of one per group."""

    def check(path: str, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            if not value:
                raise _fail(path, must, value)
            return [check_one(f"{path}[{i}]", v) for i, v in enumerate(value)]
        return check_one(path, value)

    return check


def _plain(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _adafactor_eps(path: str, value: Any) -> Any:
    item = number(0, low_open=True)
    if isinstance(value, (list, tuple)):
        must = "must be a pair [eps1 or null, eps2] of numbers > 0"
        if len(value) != 2:
            raise _fail(path, must, value)
        first = None if value[0] is None else item(f"{path}[0]", value[0])
        return [first, item(f"{path}[1]", value[1])]
    return item(path, value)


_UNIT = number(0, 1, high_open=True)
_BETA_PAIR = sequence(2, _UNIT, "must be a pair [beta1, beta2] of numbers, each in [0, 1)")
_NON_NEG = number(0)
_POSITIVE = number(0, low_open=True)
_FLAG = boolean()
_MAYBE_FLAG = boolean(nullable=True)

# Every keyword of the optimizers zero builds (torch.optim's, zero-offload's CPU optimizers and
# DeepSpeed's switches), by name. Names not listed here are left to the class's own checks.
OPTIMIZER_PARAMS: dict[str, Check] = {
    # 0 is allowed, as in DeepSpeed and torch (a frozen run, or a schedule that sets it).
    "lr": _NON_NEG,
    "betas": _BETA_PAIR,
    "eps": _POSITIVE,
    "weight_decay": _NON_NEG,
    "momentum": _UNIT,
    "dampening": number(0, 1),
    "alpha": _NON_NEG,
    "rho": number(0, 1),
    "lr_decay": _NON_NEG,
    "initial_accumulator_value": _NON_NEG,
    "momentum_decay": _NON_NEG,
    "lambd": _NON_NEG,
    "t0": _NON_NEG,
    "beta2_decay": number(None, 0),
    "d": number(1),
    "etas": sequence(2, _POSITIVE, "must be a pair [eta_minus, eta_plus] with 0 < eta_minus < 1 < eta_plus",
                     rule=lambda pair: pair[0] < 1 < pair[1]),
    "step_sizes": sequence(2, _POSITIVE, "must be a pair [min_step, max_step] of numbers > 0, min <= max",
                           rule=lambda pair: pair[0] <= pair[1]),
    "max_iter": integer(1),
    "max_eval": lambda path, value: None if value is None else integer(1)(path, value),
    "history_size": integer(1),
    "tolerance_grad": _NON_NEG,
    "tolerance_change": _NON_NEG,
    "line_search_fn": one_of(None, "strong_wolfe"),
    "ns_steps": integer(1, 100),
    "ns_coefficients": sequence(3, number(), "must be three numbers [a, b, c]"),
    "amsgrad": _FLAG,
    "nesterov": _FLAG,
    "maximize": _FLAG,
    "centered": _FLAG,
    "decoupled_weight_decay": _FLAG,
    "differentiable": _FLAG,
    "foreach": _MAYBE_FLAG,
    "capturable": _FLAG,
    "fused": _MAYBE_FLAG,
    # DeepSpeed's switches and zero-offload's CPU optimizers' arguments.
    "adam_w_mode": _FLAG,
    "adamw_mode": _FLAG,
    "bias_correction": _FLAG,
    "torch_adam": _FLAG,
    "fp32_optimizer_states": _FLAG,
}

_LR = number_or_list(_NON_NEG, "must be a finite number >= 0, or an array of them (one per param group)")
SCHEDULER_PARAMS: dict[str, Check] = {
    "warmup_min_lr": _LR,
    "warmup_max_lr": _LR,
    # DeepSpeed reads 0 as 2 (it warms up over max(2, n) steps); zero's schedules refuse it, as here.
    "warmup_num_steps": integer(1, must="must be a positive integer"),
    "total_num_steps": integer(1),
    "warmup_type": one_of("log", "linear"),
    "warmup_min_ratio": number(0, 1),
    "cos_min_ratio": number(0, 1),
}


def check_params(block: str, kind: str, params: MutableMapping[str, Any], checks: dict[str, Check]) -> None:
    """Check (and normalize in place) the values of `params` whose names `checks` knows."""
    for key in list(params):
        path = f"{block}.params.{key}"
        check = checks.get(key)
        if block == "optimizer" and key == "eps" and kind.lower() == "adafactor":
            check = _adafactor_eps
        if check is not None:
            params[key] = check(path, params[key])
