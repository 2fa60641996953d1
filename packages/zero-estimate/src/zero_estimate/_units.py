"""Counts and byte sizes as people type them ("6.9e9", "7B", "24GB") and as reports print them."""
from __future__ import annotations

import math
import re

from ._errors import EstimateError

GIB = 2**30

# Parameter counts use decimal suffixes, as model names do (7B = 7e9).
_COUNT_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
# Memory sizes are binary, as DeepSpeed's tables and GPU specs mean them (an "80GB" A100 has 80 GiB).
_SIZE_SUFFIX = {"b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}
_NUMBER = r"(-?\d+(?:\.\d*)?(?:e[+-]?\d+)?|-?\.\d+(?:e[+-]?\d+)?)"


def parse_count(text: str, field: str, *, minimum: int = 1) -> int:
    """"6.9e9", "6900000000", "6_900_000_000", "6.9B", "350M" -> a whole number >= minimum."""
    cleaned = text.strip().lower().replace("_", "").replace(",", "")
    match = re.fullmatch(_NUMBER + r"\s*([kmbgt]?)", cleaned)
    if not match:
        raise EstimateError(f"{text!r} is not a count; write e.g. 6.9e9, 6900000000 or 6.9B", field)
    value = float(match.group(1)) * _COUNT_SUFFIX[match.group(2)]
    if not math.isfinite(value):
        raise EstimateError(f"{text!r} is too large to be a count", field)
    if value < minimum:
        raise EstimateError(f"must be at least {minimum} (got {text})", field)
    return round(value)


def parse_size(text: str, field: str) -> int:
    """"24GB", "24GiB", "24G", "1.5TB", "512MiB" -> bytes (binary units); a unit is required."""
    cleaned = text.strip().lower().replace(" ", "")
    match = re.fullmatch(_NUMBER + r"([kmgtp]?)(i?b)?", cleaned)
    if not match or (not match.group(2) and not match.group(3)):
        raise EstimateError(f"{text!r} is not a size; write a number with a unit, e.g. 24GB or 512MiB", field)
    value = float(match.group(1)) * _SIZE_SUFFIX[match.group(2) or "b"]
    if not math.isfinite(value):
        raise EstimateError(f"{text!r} is too large to be a size", field)
    if value <= 0:
        raise EstimateError(f"must be greater than 0 (got {text})", field)
    return round(value)


def gib(nbytes: float) -> str:
    """Bytes as GiB with two decimals, the unit of every table."""
    return f"{nbytes / GIB:.2f}"


def human_size(nbytes: float) -> str:
    """Bytes with their unit: GiB with two decimals, or MiB with one below a GiB (a small model's peaks)."""
    return f"{nbytes / GIB:.2f} GiB" if abs(nbytes) >= GIB else f"{nbytes / 2**20:.1f} MiB"


def human_count(n: int) -> str:
    """6857302016 -> "6.86B", for one-line summaries."""
    for suffix, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{n / scale:.{2 if n < 100 * scale else 1}f}{suffix}"
    return str(n)
