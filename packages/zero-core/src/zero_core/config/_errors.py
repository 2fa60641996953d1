"""ConfigError and the translation of pydantic's errors into one line: `path: problem (got value)`."""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from zero_plugins import ZeroError

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails  # what ValidationError.errors() lists


class ConfigError(ZeroError):
    """A config value or key that zero cannot use; the message names the JSON path, the problem and the fix."""

    def __init__(self, path: str, problem: str) -> None:
        # One line, whatever a key or a file name holds: line breaks are shown escaped.
        self.path = one_line(path)
        self.problem = one_line(problem)
        super().__init__(f"{self.path}: {self.problem}" if self.path else self.problem)

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, str]]:
        # Rebuilt from both parts when pickled, e.g. when a rank's error crosses to the launching process.
        return type(self), (self.path, self.problem)


class IgnoredConfigKeysWarning(UserWarning):
    """DeepSpeed keys that zero accepts but does not implement (one warning per `load_config`)."""


# Every character str.splitlines() breaks at.
_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_ESCAPED = str.maketrans({ch: ch.encode("unicode_escape").decode("ascii") for ch in _LINE_BREAKS})


def one_line(text: str) -> str:
    """`text` with its line breaks escaped (`\\n`), so a message stays on one line."""
    return text.translate(_ESCAPED)


def json_path(loc: Sequence[str | int]) -> str:
    """`("optimizer", "params", "betas", 0)` -> `optimizer.params.betas[0]`."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part == "[key]":
            # pydantic's marker for an error in a mapping's key rather than its value.
            path += " (a key)"
        else:
            path += f".{part}" if path else part
    return path


def join_path(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def show(value: Any, limit: int = 60) -> str:
    """A value as JSON would spell it (true, null, "cpu"), cut short so the message stays one line."""
    try:
        text = json.dumps(value, default=str)
    except (ValueError, TypeError, RecursionError):
        # A circular or deeply nested structure, or an int too long to print.
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# pydantic's error types, said the way a config author thinks ("must be an integer").
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


def _problem(error: ErrorDetails) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind in _PHRASES:
        return _PHRASES[kind]
    if kind == "greater_than":
        return f"must be > {ctx['gt']}"
    if kind == "greater_than_equal":
        return f"must be >= {_bound(ctx['ge'])}"
    if kind == "less_than":
        return f"must be < {_bound(ctx['lt'])}"
    if kind == "less_than_equal":
        return f"must be <= {_bound(ctx['le'])}"
    if kind == "literal_error":
        return f"must be {ctx['expected']}".replace("'", '"')
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    # Never pydantic's own wording ("Input should be ..."): say what was wrong in ours.
    return "is not a valid value here (docs/config.md gives each key's type)"


def _bound(value: Any) -> str:
    """2**64 as 18446744073709551616, not 1.8446744073709552e+19."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def from_validation_error(exc: ValidationError) -> ConfigError:
    """The first of pydantic's errors as a ConfigError; one error at a time keeps the message to one line."""
    error = exc.errors(include_url=False)[0]
    problem = _problem(error)
    value = error.get("input")
    if error["type"] != "missing" and not isinstance(value, Mapping) and error["type"] != "recursion_loop":
        problem += f" (got {show(value)})"
    return ConfigError(json_path(error["loc"]), problem)
