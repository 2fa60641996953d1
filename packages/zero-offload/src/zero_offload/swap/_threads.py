"""The built-in `threads` backend: O_DIRECT pwrite/preadv from a pool of threads.

Nothing to compile and no system package: Python's os.pwrite and os.preadv release the GIL
for the system call, so the threads' requests run in parallel in the kernel.

A request (one tensor) is split into `aio.block_size` blocks (see _requests). Each block is a
blocking system call, so a block in flight occupies a thread: the pool has
intra_op_parallelism x queue_depth threads, which keeps as many blocks in flight as
DeepSpeed's libaio handle does (intra_op_parallelism threads, each with queue_depth
submissions outstanding). Threads start on demand, up to that number. Blocks of all requests
share one FIFO queue, so concurrent requests progress together and each one's blocks are
issued in file order.
"""
from __future__ import annotations

import ctypes
import os
import queue
import threading

from ._requests import Block, call_name
from ._workers import QueuedBackend, WorkerQueue


def _transfer(block: Block) -> None:
    request = block.request
    if request.error is not None:  # an earlier block failed: issue nothing more of this request
        request.block_done(None)
        return
    view = memoryview((ctypes.c_ubyte * block.length).from_address(block.address)).cast("B")
    error = None
    done = 0
    try:
        while done < block.needed:
            if request.write:
                moved = os.pwrite(request.fd, view[done:], block.offset + done)
            else:
                moved = os.preadv(request.fd, [view[done:]], block.offset + done)
            if moved == 0:
                error = request.ended_early(call_name(request.write, block.length - done, block.offset + done))
                break
            done += moved
        if error is None:
            block.finish_tail()
    except OSError as failure:
        error = request.failed(call_name(request.write, block.length - done, block.offset + done),
                               f"{failure.strerror} [errno {failure.errno}]", failure.errno)
    except Exception as failure:  # never leave a request waiting on a block that died
        error = request.failed(call_name(request.write, block.length - done, block.offset + done), repr(failure))
    request.block_done(error)


class _Pool(WorkerQueue):
    """Worker threads on one FIFO queue, started on demand."""

    def __init__(self, max_threads: int) -> None:
        super().__init__()
        self.max_threads = max_threads

    def submit(self, blocks: list[Block]) -> None:
        with self._lock:
            self._forget_after_fork()
            wanted = min(self.max_threads, len(self._workers) + len(blocks))
            while len(self._workers) < wanted:
                thread = threading.Thread(target=_work, args=(self._queue,), daemon=True,
                                          name=f"zero-swap-{len(self._workers)}")
                thread.start()
                self._workers.append(thread)
        self.put(blocks)


def _work(blocks: queue.SimpleQueue[Block | None]) -> None:
    while (block := blocks.get()) is not None:
        _transfer(block)


class ThreadsBackend(QueuedBackend):
    """O_DIRECT reads and writes issued by a thread pool; needs nothing but Linux and Python."""

    @property
    def threads(self) -> int:
        """A blocking call occupies a thread: as many as DeepSpeed's libaio keeps blocks in flight."""
        return self.aio.intra_op_parallelism * self.aio.queue_depth

    def _make_workers(self) -> WorkerQueue:
        return _Pool(self.threads)

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if not hasattr(os, "preadv") or not hasattr(os, "O_DIRECT"):
            return False, "needs os.preadv and O_DIRECT (Linux)"
        return True, "O_DIRECT pwrite/preadv from a thread pool (built in, nothing to compile)"
