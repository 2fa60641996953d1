"""Validation shared by every entry point, so the API and the CLI reject the same inputs."""
from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from typing import NoReturn

from ._errors import EstimateError


def count(value: object, field: str, *, minimum: int = 1) -> int:
    """A whole number of things (params, GPUs, elements) at least `minimum`.

    Floats are accepted when they are whole (2851e6), because DeepSpeed's examples pass them.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EstimateError(f"must be a number (got {value!r})", field)
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise EstimateError(f"must be a whole number (got {value!r})", field)
    if value < minimum:
        raise EstimateError(f"must be at least {minimum} (got {_plain(value)})", field)
    return int(value)


def positive_number(value: object, field: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise EstimateError(f"must be a finite number (got {value!r})", field)
    if value < 0 or (value == 0 and not allow_zero):
        bound = "0 or more" if allow_zero else "greater than 0"
        raise EstimateError(f"must be {bound} (got {_plain(value)})", field)
    return value


def choice(value: object, field: str, choices: Iterable[str]) -> str:
    options = list(choices)
    if value not in options:
        unknown(value, field, options)
    return str(value)


def unknown(
    value: object, field: str, options: Iterable[str], *, what: str = "value", otherwise: str = ""
) -> NoReturn:
    """Raise "unknown value 'x'; did you mean 'y'? choose from: a, b", plus an `otherwise` hint."""
    names = list(options)
    hint = difflib.get_close_matches(str(value), names, n=1)
    did_you_mean = f"; did you mean {hint[0]!r}?" if hint else ";"
    tail = f"; {otherwise}" if otherwise else ""
    raise EstimateError(f"unknown {what} {value!r}{did_you_mean} choose from: {', '.join(names)}{tail}", field)


def _plain(value: int | float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
