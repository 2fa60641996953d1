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
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = message
