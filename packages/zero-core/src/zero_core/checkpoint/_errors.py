"""The error a damaged or foreign checkpoint raises: a ZeroError, so the `zero` command prints it as one line."""
from __future__ import annotations

from zero_plugins import ZeroError


class CheckpointError(ZeroError):
    """A checkpoint's files are not what its save wrote (a file changed, cut short or missing, a damaged
    description or manifest, a data path outside the tag): the message names the file and the way out."""
