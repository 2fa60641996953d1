"""The interface every swap-I/O backend implements (the built-in `threads`, or a plugin's).

A backend moves a tensor's bytes to and from a file at an offset, asynchronously: `write_async`
and `read_async` return a SwapHandle at once, and its `wait()` returns when the data has
arrived, or raises the first error of the request. The tensor must stay untouched (and alive,
which the handle ensures) until then.

The contract all backends share, so that callers can swap between them:
- Buffers are dense, contiguous CPU tensors whose memory starts on an ALIGNMENT (4 KiB)
  boundary; offsets are multiples of ALIGNMENT. Anything else is an UnalignedBufferError.
- A tensor of `nbytes` occupies `padded_nbytes(nbytes)` bytes of the file; the padding is
  written as zeros, and a read never writes past the tensor's last byte.
- I/O uses O_DIRECT. A path without it is a DirectIOUnsupportedError naming the fix, unless
  the backend was made `buffered` (ZERO_SWAP_BUFFERED=1).
- A failed system call makes `wait()` raise a SwapIOError naming the file and the call;
  the remaining blocks of that request are not issued.
- The ds_config's `aio` block sets the request size (`block_size`), the requests in flight
  per thread (`queue_depth`) and the threads (`intra_op_parallelism`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import TYPE_CHECKING

from ._direct import buffered_from_env

if TYPE_CHECKING:
    import torch
    from zero_plugins.ds_config import AioConfig

_ALIGNMENT = 4096  # ._buffers.ALIGNMENT, repeated so that this module imports no torch


class SwapHandle(ABC):
    """One asynchronous read or write."""

    @abstractmethod
    def wait(self, timeout: float | None = None) -> int:
        """Block until the request is complete and return the bytes moved (the tensor's byte length).

        Raises the request's SwapIOError if a system call failed, TimeoutError if `timeout`
        seconds pass first (the request then goes on).
        """

    @abstractmethod
    def done(self) -> bool:
        """True when the request has completed, successfully or not (wait() will not block)."""


class SwapBackend(ABC):
    """Reads and writes tensors to files. Register a subclass through `zero_register_swap_backends`;
    ZERO_SWAP_BACKEND selects one by name. Each instance owns its own workers (threads, rings):
    close it, or use it as a context manager.
    """

    #: The name it was registered under, set when it is created by get_swap_backend().
    name: str = ""

    def __init__(self, aio: AioConfig | None = None, *, buffered: bool | None = None) -> None:
        # The config (pydantic) is imported here: listing backends and `zero` commands stays light.
        from zero_plugins.ds_config import AioConfig, ConfigError

        self.aio = aio if aio is not None else AioConfig()
        if self.aio.block_size % _ALIGNMENT:
            raise ConfigError("aio.block_size", f"must be a multiple of {_ALIGNMENT} bytes for O_DIRECT "
                                                f"(got {self.aio.block_size}); e.g. 1048576")
        #: Plain reads and writes through the page cache instead of O_DIRECT (see _direct).
        self.buffered = buffered_from_env() if buffered is None else buffered

    @classmethod
    @abstractmethod
    def available(cls) -> tuple[bool, str]:
        """Whether the backend can run here, and why (or why not). Must not raise."""

    @abstractmethod
    def write_async(self, tensor: torch.Tensor, path: str, offset: int = 0) -> SwapHandle:
        """Start writing the tensor's bytes to `path` (created if missing, never truncated) at `offset`."""

    @abstractmethod
    def read_async(self, tensor: torch.Tensor, path: str, offset: int = 0) -> SwapHandle:
        """Start reading the tensor's byte length from `path` at `offset` into the tensor."""

    def write(self, tensor: torch.Tensor, path: str, offset: int = 0) -> int:
        """write_async(...).wait(): the bytes written, or the SwapIOError."""
        return self.write_async(tensor, path, offset).wait()

    def read(self, tensor: torch.Tensor, path: str, offset: int = 0) -> int:
        """read_async(...).wait(): the bytes read, or the SwapIOError."""
        return self.read_async(tensor, path, offset).wait()

    def close(self) -> None:  # noqa: B027 - a backend without workers has nothing to release
        """Release the workers once the requests already submitted have finished."""

    def describe(self) -> str:
        """The settings in effect, for reports: `block 1.00 MiB, queue depth 8, 1 thread(s), O_DIRECT`."""
        from ._units import format_bytes

        mode = "buffered" if self.buffered else "O_DIRECT"
        return (f"block {format_bytes(self.aio.block_size)}, queue depth {self.aio.queue_depth}, "
                f"{self.aio.intra_op_parallelism} thread(s), {mode}")

    def __enter__(self) -> SwapBackend:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
