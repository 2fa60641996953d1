"""Byte counts on the command line: `1GiB`, `512MiB`, `1M`, `4096`, `1.5G` (binary units, as DeepSpeed's aio sweep)."""
from __future__ import annotations

import re

from zero_pin import format_bytes

from ._errors import SwapError

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20, "mib": 2**20,
          "g": 2**30, "gb": 2**30, "gib": 2**30, "t": 2**40, "tb": 2**40, "tib": 2**40}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str, option: str) -> int:
    """`1GiB` -> 1073741824. K, M, G, T (with or without B or iB) are binary units; SwapError names `option`."""
    match = _PATTERN.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise SwapError(f"{option}: {text!r} is not a byte count; write e.g. 1GiB, 512MiB, 1M or 4096")
    value = float(match.group(1)) * _UNITS[unit]
    if value != int(value) or value <= 0:
        raise SwapError(f"{option}: {text!r} must be a positive whole number of bytes")
    return int(value)


def parse_list(text: str, option: str, parse: type[int] | None = None) -> list[int]:
    """`256K,1M` -> [262144, 1048576] (byte counts); with parse=int, plain positive integers."""
    values = []
    for item in text.split(","):
        if parse is int:
            if not item.strip().isdigit() or int(item) <= 0:
                raise SwapError(f"{option}: {item.strip()!r} is not a positive integer; write e.g. 1,2,4")
            values.append(int(item))
        else:
            values.append(parse_bytes(item, option))
    return values


__all__ = ["format_bytes", "parse_bytes", "parse_list"]
