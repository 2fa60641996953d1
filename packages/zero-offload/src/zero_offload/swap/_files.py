"""Opening swap files, and the checks every request makes before any data moves (shared by the backends)."""
from __future__ import annotations

import ctypes
import errno
import os
from typing import TYPE_CHECKING, Any

from ._buffers import check_offset, check_swappable
from ._direct import O_DIRECT, check_direct_io, einval_message
from ._errors import DirectIOUnsupportedError, SwapError, SwapIOError
from ._links import NO_FOLLOW, link_refusal

if TYPE_CHECKING:
    import torch


def prepare(tensor: object, path: str | os.PathLike[str], offset: int, *, write: bool,
            buffered: bool) -> tuple[torch.Tensor, str, int]:
    """Check the request and open the file: (tensor, path, fd). Raises before anything is read or written."""
    what = "swap write" if write else "swap read"
    checked = check_swappable(tensor, what)
    check_offset(offset, what)
    path = os.fspath(path)
    if not isinstance(path, str):
        raise SwapError(f"{what}: the path must be text, got {path!r}")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise SwapIOError(path, "open", f"the directory {directory} does not exist", errno.ENOENT)
    if not buffered:
        check_direct_io(directory)
    flags = (os.O_WRONLY | os.O_CREAT if write else os.O_RDONLY) | (0 if buffered else O_DIRECT) | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | NO_FOLLOW, 0o600)  # a link at a swap file's name is refused, never followed
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise link_refusal(path) from None
        if error.errno == errno.EINVAL and not buffered:
            raise DirectIOUnsupportedError(einval_message(path)) from None
        mode = "O_WRONLY|O_CREAT" if write else "O_RDONLY"
        raise SwapIOError(path, f"open({mode}{'' if buffered else '|O_DIRECT'})",
                          f"{error.strerror} [errno {error.errno}]", error.errno) from None
    return checked, path, fd


_NOT_SUPPORTED = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})
_fallocate: Any = None


def reserve(fd: int, path: str, offset: int, nbytes: int) -> None:
    """Allocate the file's blocks for [offset, offset + nbytes) before a write that extends the file.

    ext4 and xfs serialise O_DIRECT writes that extend a file or fill holes, but let writes
    into allocated blocks run in parallel; a full disk also fails here, before any data is
    written. Uses fallocate(2) directly: glibc's posix_fallocate would emulate it by writing
    zeros on file systems without it, where this simply does nothing.
    """
    global _fallocate
    if _fallocate is None:
        libc = ctypes.CDLL(None, use_errno=True)
        function = getattr(libc, "fallocate64", None) or getattr(libc, "fallocate", None)
        if function is not None:
            function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
            function.restype = ctypes.c_int
        _fallocate = function or False
    if not _fallocate:
        return
    if _fallocate(fd, 0, offset, nbytes) == 0:
        return
    code = ctypes.get_errno()
    if code in _NOT_SUPPORTED:
        return
    os.close(fd)
    raise SwapIOError(path, f"fallocate({nbytes} bytes at offset {offset})", f"{os.strerror(code)} [errno {code}]; "
                      "nothing was written", code)
