"""Environment variables read as flags and integers, in one place: a value that is not one of the documented
spellings is one error naming the variable and the form expected, never a bare `int()` error or a silent default."""
from __future__ import annotations

import os

from ._errors import ZeroError

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class EnvVarError(ZeroError, ValueError):
    """An environment variable holds a value that is not of its documented form."""


def env_flag(name: str, default: bool) -> bool:
    """`name` as a boolean: 1/0, true/false, yes/no, on/off (any case, surrounding blanks ignored); unset or
    blank gives `default`."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise EnvVarError(f"{name}={raw!r} is not a flag: set it to 1, true, yes or on (or 0, false, no, off; any case), "
                      f"or unset it for the default ({'on' if default else 'off'})")


def env_int(name: str, default: int, minimum: int) -> int:
    """`name` as a whole number >= `minimum` (decimal digits, an optional sign, surrounding blanks ignored); unset
    or blank gives `default`."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    text = raw.strip()
    digits = text[1:] if text[:1] in "+-" else text
    # int() alone would also take "1_000" and non-ASCII digits: a launcher writes plain ASCII decimals.
    if not (digits.isascii() and digits.isdigit()) or int(text) < minimum:
        raise EnvVarError(f"{name}={raw!r} is not a whole number >= {minimum}: set it to one (e.g. {max(minimum, 1)}),"
                          f" or unset it for the default ({default})")
    return int(text)
