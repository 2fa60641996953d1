"""ConfigError and the translation of pydantic's errors into one line: `path: problem (got value)`."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from .._errors import ZeroError
from .._validation import validation_problem

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
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 160:
        # Past ~48 digits the number would be cut short anyway, and Python refuses to print more than 4300 digits.
        digits = int(value.bit_length() * math.log10(2)) + 1
        return f"{'a negative' if value < 0 else 'an'} integer of about {digits} digits"
    try:
        text = json.dumps(value, default=str)
    except (ValueError, TypeError, RecursionError):
        # A circular or deeply nested structure.
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _problem(error: ErrorDetails) -> str:
    return validation_problem(error["type"], error.get("ctx"),
                              "is not a valid value here (docs/config.md gives each key's type)")


def from_validation_error(exc: ValidationError) -> ConfigError:
    """The first of pydantic's errors as a ConfigError; one error at a time keeps the message to one line."""
    error = exc.errors(include_url=False)[0]
    problem = _problem(error)
    value = error.get("input")
    if error["type"] != "missing" and not isinstance(value, Mapping) and error["type"] != "recursion_loop":
        problem += f" (got {show(value)})"
    return ConfigError(json_path(error["loc"]), problem)
