"""ReportTable: what a plugin's `zero report` section builds (its own module: the hookspec and
the section collector both need it, and neither may import the other)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ReportTable:
    """What a section's build() returns: a table for the text report and the data for --json."""

    headers: Sequence[str]
    rows: Sequence[Sequence[object]]
    data: object  # JSON-able; `zero report --json` prints it under the section's key
