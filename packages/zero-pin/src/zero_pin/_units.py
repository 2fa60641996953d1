"""Byte counts for messages: binary units, as `ulimit -l` and /proc report them."""
from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def format_bytes(nbytes: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if nbytes >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} B"
