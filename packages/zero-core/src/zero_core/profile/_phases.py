"""Measure an engine's memory phase by phase: the Python API behind `zero profile`.

`profile_engine(engine, train_step, batches)` turns the engine's storage tracking on, takes a snapshot of
the ledger right after `initialize` ("init"), runs `train_step(engine, batch)` for each batch and reads
per phase (forward, backward, step) two figures: the allocator's peak inside the phase (the ruler: CUDA's
caching allocator, or zero-pin's count of the CPU allocator) and the ledger's categories at the moment its
total was highest inside the phase, over the steps after the first. The first step creates the optimizer's
state inside torch's `step()`, where the ledger can only file it as `other` until the step returns; from the
second step on it is `optim.state`, held through every phase, as it will be for the rest of training. (With
one batch, that one step is measured.) A phase that did not happen is absent, with the reason: no optimizer
step in fewer micro-steps than gradient_accumulation_steps.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..engine import ZeroEngine
    from ..memory.ruler import PhaseAllocation

PHASES = ("init", "forward", "backward", "step")
#: {phase: {location: {category: bytes, ..., "total": bytes}}}
PhaseMemory = dict[str, dict[str, dict[str, int]]]


@dataclass
class ProfiledPhases:
    """What `profile_engine` measured: the ledger per phase, and the allocator beside it where one counts."""

    ledger: PhaseMemory
    #: {phase: {"allocator": peak, "ledger": the ledger's counted peak, "untracked": the difference}}
    allocator: dict[str, PhaseAllocation] = field(default_factory=dict)
    ruler: str | None = None  # what counted ("CPU allocator count", "CUDA caching allocator"); None: nothing
    #: the ledger's locations whose bytes the allocator counts
    allocator_locations: list[str] = field(default_factory=list)
    #: {phase: why it did not happen} for each phase the steps never entered (absent from the figures above)
    absent: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"ledger": self.ledger, "allocator": self.allocator, "ruler": self.ruler,
                "allocator_locations": self.allocator_locations, "absent": self.absent}


def hf_train_step(engine: ZeroEngine, batch: Any, on_loss: Callable[[Any], object] | None = None) -> None:
    """A causal-LM step: the batch is the input ids and the labels; `on_loss(loss)` sees the loss before its
    backward (zero profile reads the attention kernels from its graph)."""
    loss = engine(input_ids=batch, labels=batch).loss
    if on_loss is not None:
        on_loss(loss)
    engine.backward(loss)
    engine.step()


def profile_engine(engine: ZeroEngine, train_step: Callable[[ZeroEngine, Any], object],
                   batches: Iterable[Any], progress: Callable[[int], None] | None = None) -> ProfiledPhases:
    """Run `train_step(engine, batch)` on each batch with tracking on; the memory of each phase.

    Call it right after `initialize`: "init" is what the ledger (and the allocator) hold when it starts. It
    resets the ledger's phase peaks and leaves tracking as it found it. `progress(step)` is called after each
    step. On CPU, tracking starts zero-pin's allocator count if nothing did; start it before the model is built
    (`get_accelerator().count_allocations()`) so that the model's weights are counted too.
    """
    ledger = engine.ledger
    was_tracking = ledger.tracking
    engine.track_memory(True)  # first: on CPU it starts the allocator's count
    phases: PhaseMemory = {"init": ledger.snapshot()}
    init = ledger.allocator_now()
    ledger.reset_phase_peaks()
    micro_steps = 0
    try:
        for step, batch in enumerate(batches, start=1):
            if step == 2:
                ledger.reset_phase_peaks()  # see the module's docstring: the first step creates the state
            train_step(engine, batch)
            micro_steps = step
            if progress is not None:
                progress(step)
    finally:
        engine.track_memory(was_tracking)
    for phase, locations in ledger.phase_peaks().items():
        phases[phase] = locations
    absent = {phase: absence(phase, micro_steps, engine.gradient_accumulation_steps())
              for phase in PHASES if phase not in phases}
    figures = ledger.allocator_figures()
    if figures is None or init is None:
        return ProfiledPhases(phases, absent=absent)
    return ProfiledPhases(phases, {"init": init, **figures["phases"]}, figures["ruler"], figures["locations"], absent)


def absence(phase: str, micro_steps: int, accumulation: int) -> str:
    """Why `phase` did not happen in `micro_steps` micro-steps: the optimizer steps once every `accumulation`."""
    counted = f"{micro_steps} micro-step{'' if micro_steps == 1 else 's'}"
    if phase == "step":
        return f"no optimizer step in {counted} at gradient_accumulation_steps {accumulation}"
    return f"no {phase} in {counted}"
