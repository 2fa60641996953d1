"""The one error type of zero-estimate: bad input, reported as a single line."""
from __future__ import annotations

from zero_plugins import ZeroError


class EstimateError(ZeroError, ValueError):
    """A count, size, option or model description that cannot be estimated.

    `field` names the input (an API argument such as "gpus_per_node"), so the CLI can
    print its own flag ("--gpus") in its place. The message says what was wrong and what
    to pass instead.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        message = one_line(message)
        super().__init__(f"{one_line(field)}: {message}" if field else message)
        self.field = field
        self.reason = message


# Every character str.splitlines() breaks at: a file name or a value holding one stays on the line, escaped.
_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_ESCAPED = str.maketrans({ch: ch.encode("unicode_escape").decode("ascii") for ch in _LINE_BREAKS})


def one_line(text: str) -> str:
    return text.translate(_ESCAPED)
