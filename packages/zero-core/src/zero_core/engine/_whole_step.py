"""A step is whole or not at all: Ctrl-C waits for the step to end, and a step that failed part-way stops training.

An optimizer step updates the master one tensor (or sub-group, or swap slice) at a time, so an
exception between two of them leaves some parameters updated and the rest not, with the step
uncounted. A copy to roll back to would cost the whole master and state again, so the engine
does the two things that cost nothing: SIGINT, the one exception a user sends on purpose, is
held until the step and its counters are done and then raised (a second Ctrl-C raises at once);
any other failure once the first update began marks the engine, which then refuses to train on or
save those weights until a checkpoint is loaded.
"""
from __future__ import annotations

import logging
import signal
import threading
from types import FrameType, TracebackType
from typing import Any

from zero_plugins import ZeroError

_LOGGER = logging.getLogger("zero_core.engine")


class HalfAppliedStep(ZeroError, RuntimeError):
    """A step failed after it had updated some parameters: the weights are no step's weights."""


class InterruptsHeld:
    """Holds SIGINT from `__enter__` to `__exit__` (a `with` body, or a backward that steps to the end of its
    step()) and then raises it as its previous handler would.

    Only the main thread receives signals, so elsewhere this does nothing. A second SIGINT while one is held
    goes to the previous handler at once: a user who presses Ctrl-C twice gets the usual KeyboardInterrupt."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._previous: Any = None
        self._held: tuple[int, FrameType | None] | None = None
        self._installed = False

    def __enter__(self) -> InterruptsHeld:
        if not self._installed and threading.current_thread() is threading.main_thread():
            self._previous = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._hold)
            self._installed = True
        return self

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        if self._held is not None:
            self._restore()
            self._deliver(signum, frame)
            return
        self._held = (signum, frame)
        _LOGGER.warning("interrupt received during %s: finishing it so the weights and the step count agree "
                        "(press Ctrl-C again to stop now, leaving the step half applied)", self._what)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._restore()
        if self._held is not None and error is None:
            self._deliver(*self._held)

    def _restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    def _deliver(self, signum: int, frame: FrameType | None) -> None:
        if callable(self._previous):
            self._previous(signum, frame)  # Python's default handler raises KeyboardInterrupt here
        elif self._previous == signal.SIG_DFL:
            signal.raise_signal(signum)  # the handler restored is the default one, which ends the process


def half_applied(step: int, error: BaseException) -> HalfAppliedStep:
    """The error a step that failed part-way leaves behind, for every later call the engine refuses."""
    reason = f"{type(error).__name__}: {str(error).strip().splitlines()[0]}" if str(error).strip() \
        else type(error).__name__
    return HalfAppliedStep(f"step {step} failed after it had updated some parameters ({reason}), so the weights are "
                           "no step's weights and the step was not counted; training on or saving them is refused. "
                           "Load the last checkpoint with engine.load_checkpoint(...) to go on")
