"""Worker threads that take blocks from one FIFO queue, and the backend over them: what both built-in backends share.

A WorkerQueue subclass starts its threads (in `ready` or `submit`); `close()` stops and joins
them. Threads do not survive fork, so a forked child starts afresh with a new queue.
`QueuedBackend` cuts each request into blocks (`split`) and hands them to its queue.
"""
from __future__ import annotations

import os
import queue
import threading
import weakref
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from ._backend import SwapBackend, SwapHandle
from ._requests import Block, split

if TYPE_CHECKING:
    import torch
    from zero_plugins.ds_config import AioConfig


class WorkerQueue(ABC):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[Block | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._pid = os.getpid()

    def _forget_after_fork(self) -> None:
        """Call with the lock held: a forked child has none of its parent's threads."""
        if self._pid != os.getpid():
            self._queue, self._workers, self._pid = queue.SimpleQueue(), [], os.getpid()

    def ready(self) -> None:  # noqa: B027 - a queue whose workers start on submit has nothing to do here
        """Start what must run before a request is cut into blocks."""

    @abstractmethod
    def submit(self, blocks: list[Block]) -> None:
        """Queue the blocks, starting workers as needed."""

    def put(self, blocks: list[Block]) -> None:
        for block in blocks:
            self._queue.put(block)

    def close(self) -> None:
        with self._lock:
            workers, self._workers = self._workers, []
            if self._pid != os.getpid():
                return
            for _ in workers:
                self._queue.put(None)
        for worker in workers:
            worker.join()


class QueuedBackend(SwapBackend):
    """A backend whose requests are cut into blocks and served by a WorkerQueue (`_make_workers`)."""

    def __init__(self, aio: AioConfig | None = None, *, buffered: bool | None = None) -> None:
        super().__init__(aio, buffered=buffered)
        self._workers = self._make_workers()
        self._finalizer = weakref.finalize(self, self._workers.close)
        self._finalizer.atexit = False  # daemon threads; swap files are scratch data

    @abstractmethod
    def _make_workers(self) -> WorkerQueue:
        """The queue and workers for this backend's `aio` settings."""

    def write_async(self, tensor: torch.Tensor, path: str, offset: int = 0) -> SwapHandle:
        return self._submit(tensor, path, offset, write=True)

    def read_async(self, tensor: torch.Tensor, path: str, offset: int = 0) -> SwapHandle:
        return self._submit(tensor, path, offset, write=False)

    def close(self) -> None:
        self._finalizer()

    def _submit(self, tensor: torch.Tensor, path: str, offset: int, *, write: bool) -> SwapHandle:
        self._workers.ready()
        request, blocks = split(tensor, path, offset, write=write, buffered=self.buffered,
                                block_size=self.aio.block_size)
        if blocks:
            self._workers.submit(blocks)
        return request
