"""Errors of zero-pin; each message names the problem and its fix in one line."""
from __future__ import annotations

from zero_plugins import ZeroError


class PinError(ZeroError):
    """A tensor that cannot be pinned as asked (wrong type, layout or device)."""


class NativeBuildError(PinError):
    """The `native` backend's C++ op cannot be built or loaded here."""


class MemlockLimitError(PinError):
    """Pinning would exceed RLIMIT_MEMLOCK, or the kernel refused to lock the pages."""
