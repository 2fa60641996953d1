"""Pinned host memory requested per optimizer step: the proof that buffers are born pinned and reused.

Each optimizer step's interval runs from the end of the previous step (or `initialize`) to the end of
this one, so it holds the forwards and backwards of its micro-batches. Counted from zero-pin's
`pin_activity()` (every `empty_pinned` and `pin_memory` request, whatever the backend does with it; the
process's other threads included). After the first step a run whose shapes stay put requests nothing.
At each step the activation host-copy pool drops the blocks no forward took since the last step;
`engine.destroy()` releases it.
"""
from __future__ import annotations

import zero_pin

from ..checkpointing import release_host_pool, trim_host_pool


class PinningPerStep:
    def __init__(self) -> None:
        self._mark = zero_pin.pin_activity()
        self._steps: list[zero_pin.PinActivity] = []

    def end_step(self) -> None:
        trim_host_pool()
        now = zero_pin.pin_activity()
        self._steps.append(now - self._mark)
        self._mark = now

    def close(self) -> None:
        release_host_pool()

    def per_step(self) -> list[dict[str, int]]:
        """One entry per optimizer step so far: {"allocations", "allocated_bytes", "copies", "copied_bytes"}."""
        return [step.as_dict() for step in self._steps]
