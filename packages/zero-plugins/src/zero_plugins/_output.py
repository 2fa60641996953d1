"""Plain-text tables, the format every `zero` report prints without --json."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces, with a dashed rule under the headers."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


@dataclass
class CommandResult:
    """What a `zero` subcommand produced: `data` is printed for --json, `text` otherwise.

    It lives here, not in zero-cli, so packages that may not import zero-cli (every other one) can return it.
    """

    data: Any
    text: str
    exit_code: int = 0
