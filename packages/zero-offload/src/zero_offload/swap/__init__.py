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
    "SwapError": "._errors",
    "SwapIOError": "._errors",
    "UnalignedBufferError": "._errors",
    "DirectIOUnsupportedError": "._errors",
    "BUFFERED_ENV": "._direct",
    "check_direct_io": "._direct",
    "ENV_VAR": "._select",
    "backend_statuses": "._select",
    "get_swap_backend": "._select",
    "selected_name": "._select",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from ._backend import SwapBackend, SwapHandle
    from ._buffers import ALIGNMENT, aligned_empty, padded_nbytes
    from ._direct import BUFFERED_ENV, check_direct_io
    from ._errors import DirectIOUnsupportedError, SwapError, SwapIOError, UnalignedBufferError
    from ._select import ENV_VAR, backend_statuses, get_swap_backend, selected_name

__all__ = list(_EXPORTS)
