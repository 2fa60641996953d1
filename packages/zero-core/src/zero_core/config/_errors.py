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
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, str]]:
        # Rebuilt from both parts when pickled, e.g. when a rank's error crosses to the launching process.
        return type(self), (self.path, self.problem)


class IgnoredConfigKeysWarning(UserWarning):
    """DeepSpeed keys that zero accepts but does not implement (one warning per `load_config`)."""


def json_path(loc: Sequence[str | int]) -> str:
    """`("optimizer", "params", "betas", 0)` -> `optimizer.params.betas[0]`."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def join_path(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def show(value: Any, limit: int = 60) -> str:
    """A value as JSON would spell it (true, null, "cpu"), cut short so the message stays one line."""
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# pydantic's error types, said the way a config author thinks ("must be an integer").
_PHRASES = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "string_too_short": "must not be empty",
    "path_type": "must be a path (a string)",
    "dict_type": "must be an object",
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
        return f"must be >= {ctx['ge']}"
    if kind == "less_than_equal":
        return f"must be <= {ctx['le']}"
    if kind == "literal_error":
        return f"must be {ctx['expected']}".replace("'", '"')
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return error["msg"]


def from_validation_error(exc: ValidationError) -> ConfigError:
    """The first of pydantic's errors as a ConfigError; one error at a time keeps the message to one line."""
    error = exc.errors(include_url=False)[0]
    problem = _problem(error)
    value = error.get("input")
    if error["type"] != "missing" and not isinstance(value, Mapping):
        problem += f" (got {show(value)})"
    return ConfigError(json_path(error["loc"]), problem)
