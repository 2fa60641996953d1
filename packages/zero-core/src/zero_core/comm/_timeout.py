"""How long a collective may wait: `init_distributed(timeout=...)`, or `ZERO_COLLECTIVE_TIMEOUT` (seconds)."""
from __future__ import annotations

import math
import os
from datetime import timedelta

from zero_plugins import ZeroError

TIMEOUT_ENV = "ZERO_COLLECTIVE_TIMEOUT"


def collective_timeout() -> timedelta | None:
    """`ZERO_COLLECTIVE_TIMEOUT` as a timedelta; None when unset (torch's default: 30 minutes for gloo and NCCL)."""
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None or raw.strip() == "":
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise ZeroError(f"{TIMEOUT_ENV}={raw!r}: not a positive number of seconds; set it to e.g. 600, or unset it "
                        "for torch's default of 30 minutes")
    return timedelta(seconds=seconds)
