"""pydantic's validation errors in zero's words, for every package that validates with pydantic.

pydantic's own wording ("Input should be a valid integer", "For further information visit ...") must never
reach a user: each error type is said the way a config author thinks ("must be an integer"). This module
needs no pydantic: it reads the error's type and context, which are plain strings and values.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_PHRASES = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be a whole number",
    "int_parsing_size": "must be an integer of at most 4300 digits",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "string_too_short": "must not be empty",
    "path_type": "must be a path (a string)",
    "dict_type": "must be an object",
    "mapping_type": "must be an object",
    "list_type": "must be an array",
    "tuple_type": "must be an array",
    "string_unicode": "must be a string of valid Unicode",
    "string_sub_type": "must be a string",
    "recursion_loop": "is nested too deeply (or refers to itself)",
    "is_instance_of": "has the wrong type",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "missing": "is required",
}
_BOUNDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="), "less_than": ("lt", "<"),
           "less_than_equal": ("le", "<=")}


def validation_problem(kind: str, context: Mapping[str, Any] | None, fallback: str,
                       phrases: Mapping[str, str] | None = None) -> str:
    """What is wrong, in words, for one pydantic error of type `kind` with its `ctx`; `phrases` override ours."""
    ctx = context or {}
    table = {**_PHRASES, **(phrases or {})}
    if kind in table:
        return table[kind]
    if kind in _BOUNDS and _BOUNDS[kind][0] in ctx:
        name, sign = _BOUNDS[kind]
        return f"must be {sign} {_number(ctx[name])}"
    if kind in ("literal_error", "enum"):
        return f"must be {ctx.get('expected')}".replace("'", '"')
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    return fallback


def _number(value: Any) -> str:
    """2**64 as 18446744073709551616, not 1.8446744073709552e+19."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
