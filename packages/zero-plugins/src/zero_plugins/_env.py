"""On/off environment variables, read one way everywhere: the accepted spellings are defined here once.

A variable that is unset, or set to nothing but spaces, takes its default. Any other value must be
one of the spellings below (any case, spaces around ignored); anything else (`disabled`, `2`, `y`)
is an EnvVarError naming the variable, its value and the spellings, never a guess.
"""
from __future__ import annotations

import os

from ._errors import ZeroError

TRUE_SPELLINGS = ("1", "true", "yes", "on")
FALSE_SPELLINGS = ("0", "false", "no", "off")


class EnvVarError(ZeroError):
    """An environment variable set to a value zero does not accept."""


def env_flag(name: str, default: bool) -> bool:
    """The boolean environment variable `name`; `default` when it is unset or blank."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value in TRUE_SPELLINGS:
        return True
    if value in FALSE_SPELLINGS:
        return False
    raise EnvVarError(f"{name}={raw!r} is not an on/off value: use one of {'/'.join(TRUE_SPELLINGS)} to turn it on "
                      f"or {'/'.join(FALSE_SPELLINGS)} to turn it off (any case), or unset {name} for the default "
                      f"({'on' if default else 'off'})")
