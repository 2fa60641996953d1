"""Field types that take JSON values as JSON spells them.

pydantic's lax mode would read `true` as 1 and `"yes"` as true; in a config those are mistakes,
so integers and numbers refuse booleans and strings, and booleans are strict.
"""
from __future__ import annotations

import math
import sys
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, StrictBool

AUTO = "auto"


def _json_int(value: Any) -> Any:
    if isinstance(value, (bool, str)):
        raise ValueError("must be an integer")
    if isinstance(value, float) and value.is_integer() and abs(value) > MAX_INT:
        # pydantic cannot hold a whole float beyond int64 (1e19) and would say "at most 4300 digits";
        # as a Python int it meets the field's own bounds, which say what the key allows.
        return int(value)
    return value


def _json_float(value: Any) -> Any:
    if isinstance(value, (bool, str)):
        raise ValueError("must be a number")
    if isinstance(value, int) and abs(value) > sys.float_info.max:
        raise ValueError("must be a finite number")  # 10**400: no float holds it (pydantic: "must be a number")
    return value


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _not_auto(value: Any) -> Any:
    # Only the Hugging Face Trainer integration knows what "auto" should become (lr from its arguments, ...).
    if value == AUTO:
        raise ValueError('must be a concrete value; only the Hugging Face Trainer fills in "auto"')
    return value


Bool = StrictBool
# 5e8 is a float in JSON; pydantic turns whole floats into ints and refuses 1.5.
# 2**63 - 1 (int64): larger counts are typos, and torch could not hold them.
MAX_INT = 2**63 - 1
MIN_INT = -(2**63)
_Integer = Annotated[int, BeforeValidator(_json_int), Field(le=MAX_INT)]
# Each kind has one lower bound, so a huge negative number is told the key's own bound ("must be > 0").
Int = Annotated[_Integer, Field(ge=MIN_INT)]
NonNegInt = Annotated[_Integer, Field(ge=0)]
PositiveInt = Annotated[_Integer, Field(gt=0)]
Float = Annotated[float, BeforeValidator(_json_float), AfterValidator(_finite)]
NonNegFloat = Annotated[Float, Field(ge=0)]
# Free-form values handed to a constructor (optimizer/scheduler params): anything but "auto".
Param = Annotated[Any, AfterValidator(_not_auto)]
