"""Catching gathered parameters that stay alive after release.

Freeing a unit drops the engine's only reference to its gathered buffer, and a weak
reference to the buffer's storage tells whether the memory really died. If it did not,
someone else holds it: autograd, when an op saved a view of the gathered weight for
backward (the stock `F.linear` saves `weight.t()`), or, for a moment after the
all-gather completed, a backend that keeps views of the output until it moves on (not
gloo: zero's gloo collectives return once gloo let go, comm/_gloo.py). Only the first
persists, so the verdict waits for the end of the pass,
giving the backend a grace period: a storage still alive then is held. It moves to the
ledger's `param.gathered.held`, and the first one raises a single warning naming the
cause and the fix.

A unit found held is not waited for again: autograd holds it the same way every pass, and
waiting out the grace each time cost every training pass BACKEND_GRACE_S (DeepSpeed-Chat's
LoRA linears at stage 3, whose config turns memory_efficient_linear off: 0.25 s a step).
"""
from __future__ import annotations

import time
import warnings
import weakref

import torch
from zero_plugins import Category

from ..memory import MemoryLedger

HELD_CATEGORY = Category.PARAM_GATHERED_HELD
# How long the backend may take to let go of a completed collective's output. It needs
# microseconds; the margin covers a loaded machine. Paid only when something is still alive.
BACKEND_GRACE_S = 0.25


class HeldParametersWarning(UserWarning):
    """Gathered stage-3 parameters stayed in memory after their module released them."""


class HeldMemoryDetector:
    def __init__(self, ledger: MemoryLedger) -> None:
        self._ledger = ledger
        self._pending: list[tuple[weakref.ref[torch.UntypedStorage], str]] = []
        self._warned = False
        self.held_units: list[str] = []  # units found held, in order (for reports and tests)
        self._known_held: set[str] = set()  # units found held before: their storages are not waited for

    def released(self, storage: weakref.ref[torch.UntypedStorage], name: str) -> None:
        if storage() is not None:
            self._pending.append((storage, name))

    def settle(self) -> None:
        """At the end of a pass: wait out the backend's grace period, then call what is still alive held."""
        deadline = time.monotonic() + BACKEND_GRACE_S
        while self._awaited() and time.monotonic() < deadline:
            time.sleep(0.001)
        pending, self._pending = self._pending, []
        for storage, name in pending:
            alive = storage()
            if alive is not None:
                self._held(alive, name)

    def _awaited(self) -> bool:
        """Whether a storage the backend may still let go of is alive: one of a unit not found held before."""
        return any(storage() is not None for storage, name in self._pending if name not in self._known_held)

    def _held(self, storage: torch.UntypedStorage, name: str) -> None:
        self._ledger.relabel(storage, HELD_CATEGORY)
        self.held_units.append(name)
        self._known_held.add(name)
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"zero stage 3: the gathered parameters of {name} are still alive after release: autograd saved a "
                "view of the gathered weight for backward (the stock F.linear saves weight.t()), so every such "
                "weight stays in memory until backward (ledger: param.gathered.held). Fix: set "
                "zero_optimization.memory_efficient_linear: true, or checkpoint the activations of these modules.",
                HeldParametersWarning,
                stacklevel=2,
            )
