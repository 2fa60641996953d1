"""A read or write request split into blocks: bookkeeping shared by the backends.

A request (one tensor) becomes `aio.block_size` blocks at consecutive file offsets. A tensor
whose length is not a multiple of ALIGNMENT has its last partial block moved through a 4 KiB
bounce buffer, zero padded when written, so nothing past the tensor is read from or written
into its memory. A backend performs each block's system call(s) and reports it done with
`Request.block_done(error)`; the request completes when every block has, and closes its file.
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import NamedTuple

import torch

from ._backend import SwapHandle
from ._buffers import ALIGNMENT, aligned_empty, padded_nbytes
from ._errors import SwapIOError
from ._files import prepare, reserve


class Request(SwapHandle):
    """One tensor's read or write; its blocks are counted down as the backend completes them."""

    def __init__(self, path: str, fd: int, write: bool, nbytes: int, offset: int) -> None:
        self.path, self.fd, self.write, self.nbytes, self.offset = path, fd, write, nbytes, offset
        self.keep: object = None  # the tensor and the bounce buffer: alive until the last block is done
        self.error: SwapIOError | None = None
        self._lock = threading.Lock()
        self._remaining = 0
        self._done = threading.Event()

    def expect(self, blocks: int) -> None:
        self._remaining = blocks
        if blocks == 0:
            self._finish()

    def block_done(self, error: SwapIOError | None) -> None:
        with self._lock:
            if error is not None and self.error is None:
                self.error = error
            self._remaining -= 1
            last = self._remaining == 0
        if last:
            self._finish()

    def _finish(self) -> None:
        try:
            os.close(self.fd)
        except OSError as error:  # a deferred write error can surface at close
            if self.error is None:
                self.error = SwapIOError(self.path, "os.close", f"{error.strerror} [errno {error.errno}]", error.errno)
        self.keep = None
        self._done.set()

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise TimeoutError(f"swap {'write' if self.write else 'read'} of {self.nbytes} bytes on {self.path} "
                               f"is not complete after {timeout} s")
        if self.error is not None:
            raise self.error.with_traceback(None)
        return self.nbytes

    def done(self) -> bool:
        return self._done.is_set()

    def failed(self, call: str, problem: str, errno: int | None = None) -> SwapIOError:
        """The error of one of this request's calls, saying the request is incomplete."""
        kind = "write" if self.write else "read"
        return SwapIOError(self.path, call, f"{problem}; the {kind} of {self.nbytes} bytes at offset {self.offset} "
                           "is incomplete", errno)

    def ended_early(self, call: str) -> SwapIOError:
        """A read that hit the end of the file, or a write that moved nothing."""
        if self.write:
            return self.failed(call, "wrote nothing")
        size = os.fstat(self.fd).st_size
        return SwapIOError(self.path, call, f"the file ends at byte {size}, before the request's end "
                           f"({self.offset + self.nbytes}); was it written there?")


class Block(NamedTuple):
    """One system call's worth of a request: `length` bytes at `address` <-> the file at `offset`.

    `needed` is what must move (less than `length` only for a tail read, where the file may end
    inside the padding); `tail` is where a tail read's bytes go, or 0.
    """

    request: Request
    offset: int
    address: int
    length: int
    needed: int
    tail: int

    def finish_tail(self) -> None:
        if self.tail:
            ctypes.memmove(self.tail, self.address, self.needed)


def call_name(write: bool, nbytes: int, offset: int) -> str:
    """How a block's system call is named in errors: `os.pwrite(1048576 bytes at offset 0)`."""
    return f"os.{'pwrite' if write else 'preadv'}({nbytes} bytes at offset {offset})"


def split(tensor: object, path: str, offset: int, *, write: bool, buffered: bool, block_size: int) -> tuple[Request, list[Block]]:
    """Check and open, reserve the file's blocks for a write that extends it, and cut the request into blocks."""
    checked, path, fd = prepare(tensor, path, offset, write=write, buffered=buffered)
    nbytes = checked.numel() * checked.element_size()
    if write and nbytes and os.fstat(fd).st_size < offset + padded_nbytes(nbytes):
        reserve(fd, path, offset, padded_nbytes(nbytes))
    request = Request(path, fd, write, nbytes, offset)
    base = checked.data_ptr()
    body = nbytes - nbytes % ALIGNMENT
    blocks = [Block(request, offset + start, base + start, min(block_size, body - start),
                    min(block_size, body - start), 0) for start in range(0, body, block_size)]
    bounce: torch.Tensor | None = None
    if body < nbytes:
        bounce = aligned_empty(ALIGNMENT, pin=False)
        tail = nbytes - body
        if write:
            bounce.zero_()
            ctypes.memmove(bounce.data_ptr(), base + body, tail)
            blocks.append(Block(request, offset + body, bounce.data_ptr(), ALIGNMENT, ALIGNMENT, 0))
        else:
            blocks.append(Block(request, offset + body, bounce.data_ptr(), ALIGNMENT, tail, base + body))
    request.keep = (checked, bounce)
    request.expect(len(blocks))
    return request, blocks
