"""Measure an engine's memory phase by phase: the Python API behind `zero profile`.

`profile_engine(engine, train_step, batches)` turns the engine's storage tracking on, takes a snapshot of
the ledger right after `initialize` ("init"), runs `train_step(engine, batch)` for each batch and reads the
ledger's per-phase peaks: for forward, backward and step, what every category held at the moment the
location's total was highest inside that phase, over the steps after the first. The first step creates
the optimizer's state inside torch's `step()`, where the ledger can only file it as `other` until the
step returns; from the second step on it is `optim.state`, held through every phase, as it will be for
the rest of training. (With one batch, that one step is measured.)
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..engine import ZeroEngine

PHASES = ("init", "forward", "backward", "step")
#: {phase: {location: {category: bytes, ..., "total": bytes}}}
PhaseMemory = dict[str, dict[str, dict[str, int]]]


def hf_train_step(engine: ZeroEngine, batch: Any) -> float:
    """A causal-LM step: the batch is the input ids and the labels."""
    loss = engine(input_ids=batch, labels=batch).loss
    engine.backward(loss)
    engine.step()
    return float(loss.item())


def profile_engine(engine: ZeroEngine, train_step: Callable[[ZeroEngine, Any], object],
                   batches: Iterable[Any], progress: Callable[[int], None] | None = None) -> PhaseMemory:
    """Run `train_step(engine, batch)` on each batch with tracking on; the memory of each phase.

    Call it right after `initialize`: "init" is what the ledger holds when it starts. It resets the
    ledger's phase peaks and leaves tracking as it found it. `progress(step)` is called after each step.
    """
    ledger = engine.ledger
    was_tracking = ledger.tracking
    phases: PhaseMemory = {"init": ledger.snapshot()}
    ledger.reset_phase_peaks()
    engine.track_memory(True)
    try:
        for step, batch in enumerate(batches, start=1):
            if step == 2:
                ledger.reset_phase_peaks()  # see the module's docstring: the first step creates the state
            train_step(engine, batch)
            if progress is not None:
                progress(step)
    finally:
        engine.track_memory(was_tracking)
    for phase, locations in ledger.phase_peaks().items():
        phases[phase] = locations
    return phases
