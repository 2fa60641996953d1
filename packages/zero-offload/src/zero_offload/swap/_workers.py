"""Worker threads that take blocks from one FIFO queue: what both built-in backends share.

A subclass starts its threads (`_add_worker`); `close()` stops and joins them. Threads do
not survive fork, so a forked child starts afresh with a new queue.
"""
from __future__ import annotations

import os
import queue
import threading

from ._requests import Block


class WorkerQueue:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[Block | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._pid = os.getpid()

    def _forget_after_fork(self) -> None:
        """Call with the lock held: a forked child has none of its parent's threads."""
        if self._pid != os.getpid():
            self._queue, self._workers, self._pid = queue.SimpleQueue(), [], os.getpid()

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
