"""Swap I/O: tensors to and from files with O_DIRECT, through pluggable backends.

ZERO_SWAP_BACKEND selects the backend (default `threads`, built in); the ds_config's `aio`
block sets block size, queue depth and threads. See docs/offload.md, "NVMe swap I/O".
Exports load on first use, so importing this package imports no torch.
"""
from typing import TYPE_CHECKING

from zero_plugins import lazy_exports

# The exports, each declared once: mypy reads these imports, and lazy_exports reads them to import each
# name on first use (`name as name` is mypy's explicit re-export).
if TYPE_CHECKING:
    from ._backend import SwapBackend as SwapBackend, SwapHandle as SwapHandle
    from ._buffers import (
        ALIGNMENT as ALIGNMENT,
        aligned_empty as aligned_empty,
        byte_view as byte_view,
        padded_nbytes as padded_nbytes,
    )
    from ._cli import add_swap_arguments as add_swap_arguments, swap_command as swap_command
    from ._direct import (
        BUFFERED_ENV as BUFFERED_ENV,
        buffered_from_env as buffered_from_env,
        check_direct_io as check_direct_io,
    )
    from ._errors import (
        DirectIOUnsupportedError as DirectIOUnsupportedError,
        SwapError as SwapError,
        SwapIntegrityError as SwapIntegrityError,
        SwapIOError as SwapIOError,
        SwapLinkError as SwapLinkError,
        UnalignedBufferError as UnalignedBufferError,
    )
    from ._links import (
        NO_FOLLOW as NO_FOLLOW,
        make_directory as make_directory,
        open_directory as open_directory,
        remove_tree as remove_tree,
        what_is_there as what_is_there,
    )
    from ._report import (
        SWAP_REPORT_KEY as SWAP_REPORT_KEY,
        SWAP_REPORT_TITLE as SWAP_REPORT_TITLE,
        swap_backends_table as swap_backends_table,
    )
    from ._select import (
        ENV_VAR as ENV_VAR,
        backend_statuses as backend_statuses,
        get_swap_backend as get_swap_backend,
        selected_name as selected_name,
    )
    from ._threads import ThreadsBackend as ThreadsBackend
    from ._uring import IoUringBackend as IoUringBackend

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
