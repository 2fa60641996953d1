"""Swap I/O: tensors to and from files with O_DIRECT, through pluggable backends.

ZERO_SWAP_BACKEND selects the backend (default `threads`, built in); the ds_config's `aio`
block sets block size, queue depth and threads. See docs/offload.md, "NVMe swap I/O".
Exports load on first use, so importing this package imports no torch.
"""
from typing import TYPE_CHECKING

from zero_plugins import lazy_exports

_EXPORTS = {
    "ALIGNMENT": "._buffers",
    "aligned_empty": "._buffers",
    "padded_nbytes": "._buffers",
    "SwapBackend": "._backend",
    "SwapHandle": "._backend",
    "ThreadsBackend": "._threads",
    "IoUringBackend": "._uring",
    "SwapError": "._errors",
    "SwapIOError": "._errors",
    "UnalignedBufferError": "._errors",
    "DirectIOUnsupportedError": "._errors",
    "BUFFERED_ENV": "._direct",
    "buffered_from_env": "._direct",
    "check_direct_io": "._direct",
    "ENV_VAR": "._select",
    "backend_statuses": "._select",
    "get_swap_backend": "._select",
    "selected_name": "._select",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # `name as name` is mypy's explicit re-export; it reads no computed __all__
    from ._backend import SwapBackend as SwapBackend, SwapHandle as SwapHandle
    from ._buffers import (
        ALIGNMENT as ALIGNMENT,
        aligned_empty as aligned_empty,
        padded_nbytes as padded_nbytes,
    )
    from ._direct import (
        BUFFERED_ENV as BUFFERED_ENV,
        buffered_from_env as buffered_from_env,
        check_direct_io as check_direct_io,
    )
    from ._errors import (
        DirectIOUnsupportedError as DirectIOUnsupportedError,
        SwapError as SwapError,
        SwapIOError as SwapIOError,
        UnalignedBufferError as UnalignedBufferError,
    )
    from ._select import (
        ENV_VAR as ENV_VAR,
        backend_statuses as backend_statuses,
        get_swap_backend as get_swap_backend,
        selected_name as selected_name,
    )
    from ._threads import ThreadsBackend as ThreadsBackend
    from ._uring import IoUringBackend as IoUringBackend

__all__ = [*_EXPORTS]
