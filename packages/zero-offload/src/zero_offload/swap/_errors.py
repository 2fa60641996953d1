"""Errors of swap I/O; each message names what failed (file, call) and how to proceed, in one line."""
from __future__ import annotations

from zero_plugins import ZeroError


class SwapError(ZeroError):
    """A swap request that cannot be carried out as asked (buffer, offset, path, backend)."""


class UnalignedBufferError(SwapError):
    """A tensor, offset or block size that O_DIRECT cannot use: not aligned to ALIGNMENT bytes."""


class DirectIOUnsupportedError(SwapError):
    """The swap path cannot do O_DIRECT (tmpfs, some network or FUSE file systems)."""


class SwapLinkError(SwapError):
    """A link (or another kind of file) where a swap directory or file should be: refused, never followed."""


class SwapIntegrityError(SwapError):
    """A swap file read back with other bytes than this run wrote into it: changed outside zero."""


class SwapIOError(SwapError):
    """A system call of a swap read or write failed; the data of that request is incomplete.

    `path` is the file, `call` the system call as issued (with offset and length), `errno`
    the error number (None for a short read or write that returned no error).
    """

    def __init__(self, path: str, call: str, problem: str, errno: int | None = None) -> None:
        self.path = path
        self.call = call
        self.problem = problem
        self.errno = errno
        super().__init__(f"{call} on {path} failed: {problem}")

    def __reduce__(self) -> tuple[type[SwapIOError], tuple[str, str, str, int | None]]:
        return type(self), (self.path, self.call, self.problem, self.errno)
