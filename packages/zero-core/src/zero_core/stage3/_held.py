"""Catching gathered parameters that stay alive after release.

Freeing a unit drops the engine's only reference to its gathered buffer. If the storage
survives, someone else holds it. The buffer tensor itself is held only by the engine and,
for a moment after the all-gather completes, by the backend's worker thread (gloo); a view
of it made by the model (autograd saving `weight.t()` for the stock `F.linear`) holds the
storage but not the buffer tensor. So: storage alive and buffer tensor dead means held by a
view; buffer tensor alive means the backend has not let go yet, and the check is retried
when the pass ends. Held storages move to the ledger's `param.gathered.held`, and the first
one raises a single warning with the cause and the fix.
"""
from __future__ import annotations

import time
import warnings
import weakref

from ..memory.ledger import MemoryLedger

HELD_CATEGORY = "param.gathered.held"
_BACKEND_GRACE_S = 5.0  # the backend lets go within microseconds; this only bounds a wait that never ends


class HeldParametersWarning(UserWarning):
    """Gathered stage-3 parameters stayed in memory after their module released them."""


class HeldMemoryDetector:
    def __init__(self, ledger: MemoryLedger) -> None:
        self._ledger = ledger
        self._pending: list[tuple[weakref.ref, weakref.ref, str]] = []
        self._warned = False
        self.held_units: list[str] = []  # names of units found held, in order (for reports and tests)

    def released(self, buffer: weakref.ref, storage: weakref.ref, name: str) -> None:
        if storage() is None:
            return
        if buffer() is None:
            self._held(storage, name)
        else:
            self._pending.append((buffer, storage, name))

    def settle(self) -> None:
        """Decide every pending release: wait for the backend to drop the buffers it still holds."""
        deadline = time.monotonic() + _BACKEND_GRACE_S
        while self._pending:
            waiting = []
            for buffer, storage, name in self._pending:
                if storage() is None:
                    continue
                if buffer() is None:
                    self._held(storage, name)
                else:
                    waiting.append((buffer, storage, name))
            self._pending = waiting
            if waiting:
                if time.monotonic() > deadline:
                    break  # something other than the backend holds the buffer tensor: not a view, so no verdict
                time.sleep(0.0005)

    def _held(self, storage: weakref.ref, name: str) -> None:
        alive = storage()
        if alive is None:
            return
        self._ledger.relabel(alive, HELD_CATEGORY)
        self.held_units.append(name)
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"zero stage 3: the gathered parameters of {name} ({alive.nbytes()} bytes) are still alive after "
                "release: autograd saved a view of the gathered weight for backward (the stock F.linear saves "
                "weight.t()), so every such weight stays in memory until backward (ledger: param.gathered.held). "
                "Fix: set zero_optimization.memory_efficient_linear: true, or checkpoint the activations of "
                "these modules.",
                HeldParametersWarning,
                stacklevel=2,
            )
