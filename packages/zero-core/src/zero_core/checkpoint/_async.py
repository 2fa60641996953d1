"""Asynchronous saves: training goes on while a checkpoint is written.

`save_checkpoint(..., async_save=True)` gathers what to save and makes the staging directory
with every rank (as a synchronous save does), then returns; a thread per rank writes the
data through DCP on a process group of its own, copying each tensor as DCP takes it. The
copies pass through DCP's writer one file at a time (`thread_count=1`, its copy-ahead of
about 10 MB), so the staging memory is bounded, not a copy of the whole state. Forward and
backward run meanwhile; the next optimizer step waits until every tensor has been copied
(`wait_for_snapshot`), since it changes them. Publishing (`latest` last) happens in the
thread once every rank's data is durable, exactly as a synchronous save publishes. An error
in the thread is raised by the next step, save, `wait()`, or `destroy()`, as a CheckpointError naming
the tag (chained to what the thread caught).

A script may end right after an asynchronous save. While one is running, an atexit hook waits for it,
so it is published before the interpreter tears down torch's process groups (the hook is registered at
the save, after torch's own, and atexit runs the latest first); the thread is a daemon, which the
interpreter does not join by itself, and killing it inside gloo aborted the process. A save that fails
there is reported on stderr, and `latest` keeps naming the previous checkpoint.
"""
from __future__ import annotations

import atexit
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import torch.distributed as dist

from ._errors import CheckpointError

if TYPE_CHECKING:
    from ._save import PendingSave


class AsyncSaver:
    def __init__(self) -> None:
        self._group: dist.ProcessGroup | None = None
        self._thread: threading.Thread | None = None
        self._snapshot = threading.Event()
        self._snapshot.set()
        self._error: BaseException | None = None
        self._tag = ""
        self.last: Path | None = None  # the directory the last finished save published

    def start(self, pending: PendingSave) -> None:
        """Write `pending` on a thread; the caller has waited for the previous save (`wait()`)."""
        if self._group is None:
            try:
                self._group = dist.new_group(backend="gloo")  # collective: every rank is in save_checkpoint now
            except BaseException:
                if pending.owned is not None:
                    pending.owned.close()
                raise
        self._snapshot = threading.Event()
        self._tag = pending.tag
        atexit.register(self._at_exit)
        self._thread = threading.Thread(target=self._run, args=(pending,), name="zero-checkpoint", daemon=True)
        self._thread.start()

    def wait_for_snapshot(self) -> None:
        """Block until the running save has copied every tensor it writes (before a step changes them)."""
        self._snapshot.wait()
        self._raise()

    def wait(self) -> Path | None:
        """Block until the running save is published; returns its directory (None if none ran)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            atexit.unregister(self._at_exit)
        self._raise()
        return self.last

    def _at_exit(self) -> None:
        """The interpreter is exiting with a save still running: finish and publish it, or say why it was not."""
        try:
            self.wait()
        except CheckpointError as error:
            print(f"zero_core: the asynchronous save of tag {self._tag!r} did not finish before the script "
                  f"ended: {error}", file=sys.stderr)
        if self._group is not None and dist.is_initialized():
            # The save's own group, whose last collective has completed on every rank: torn down here, its threads
            # joined, not left to the interpreter's teardown (which aborted a rank now and then).
            dist.destroy_process_group(self._group)
            self._group = None

    def _run(self, pending: PendingSave) -> None:
        from ._save import write_save  # DCP is imported by a save, not by every engine that holds a saver

        try:
            self.last = write_save(pending, self._group, self._snapshot)
        except BaseException as error:  # noqa: BLE001 - handed to the training thread by wait()
            self._error = error
        finally:
            self._snapshot.set()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            if isinstance(error, CheckpointError):  # names the tag and the cause already
                raise error
            raise CheckpointError(f"the asynchronous save of tag {self._tag!r} failed: {type(error).__name__}: "
                                  f"{error}; nothing was published, `latest` names the previous checkpoint") \
                from error
