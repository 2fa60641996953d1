"""The allocator beside the ledger: what torch's allocator counts, and how much of it the ledger explains.

The allocator is the ruler (DESIGN.md, "Memory truth"): on CUDA the caching allocator's statistics, on
CPU zero-pin's exact count of the CPU allocator. The ledger explains that figure by category; what it
does not explain is `untracked` = allocator - the ledger's bytes that the allocator counts (not pinned
host memory from its own allocator, not swap files, not storages allocated before the count began).
Per phase the two peaks are set side by side: the allocator's peak (reset as the phase begins) and the
highest the ledger's counted bytes reached inside it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypedDict

import torch


class AllocatorRuler(Protocol):
    """An allocator's exact figures for one device; accelerators provide it (Accelerator.allocator_ruler)."""

    @property
    def name(self) -> str:
        """What counts, for reports: "CPU allocator count", "CUDA caching allocator"."""
        ...

    @property
    def device(self) -> str:
        """The ledger location of the device it counts ("cpu", "cuda"), where kernels' transients are filed."""
        ...

    def counts(self, storage: torch.UntypedStorage) -> bool:
        """Whether this storage's bytes are among the allocator's."""
        ...

    def current_bytes(self) -> int: ...

    def peak_bytes(self) -> int: ...

    def reset_peak(self) -> None: ...


class PhaseAllocation(TypedDict):
    allocator: int  # the allocator's peak inside the phase
    ledger: int  # the highest the ledger's counted bytes reached inside it
    untracked: int  # allocator - ledger


class AllocatorFigures(TypedDict):
    ruler: str
    locations: list[str]  # the ledger's locations whose bytes the allocator counts (e.g. "cpu", "host")
    current: int  # the allocator's bytes now
    ledger: int  # the ledger's bytes that the allocator counts, now
    untracked: int  # current - ledger
    phases: dict[str, PhaseAllocation]


class AllocatorBeside:
    """Kept by the ledger: its counted bytes, and per phase both peaks."""

    def __init__(self, ruler: AllocatorRuler) -> None:
        self.ruler = ruler
        self.counted = 0
        self.locations: set[str] = set()
        self._phase: str | None = None
        self._folded = 0  # the allocator's peak in the phase before the last per-op reset (OpTransients)
        self._allocator_peaks: dict[str, int] = {}
        self._ledger_peaks: dict[str, int] = {}

    def change(self, location: str, delta: int) -> None:
        self.counted += delta
        self.locations.add(location)
        if delta > 0 and self._phase is not None:
            self._ledger_peaks[self._phase] = max(self._ledger_peaks.get(self._phase, 0), self.counted)

    def now(self) -> PhaseAllocation:
        """The allocator's bytes and the ledger's counted bytes at this instant."""
        current = self.ruler.current_bytes()
        return PhaseAllocation(allocator=current, ledger=self.counted, untracked=current - self.counted)

    def fold_peak(self) -> None:
        """Keep the phase's peak so far before the ruler's peak is reset (per op, by OpTransients)."""
        self._folded = max(self._folded, self.ruler.peak_bytes())

    def begin_phase(self, phase: str) -> None:
        self._phase = phase
        self._folded = 0
        self.ruler.reset_peak()
        self._ledger_peaks[phase] = max(self._ledger_peaks.get(phase, 0), self.counted)

    def end_phase(self) -> None:
        if self._phase is not None:
            peak = max(self._folded, self.ruler.peak_bytes())
            self._allocator_peaks[self._phase] = max(self._allocator_peaks.get(self._phase, 0), peak)
        self._phase = None

    def reset_phases(self) -> None:
        self._allocator_peaks, self._ledger_peaks = {}, {}

    def figures(self) -> AllocatorFigures:
        current = self.ruler.current_bytes()
        phases = {phase: PhaseAllocation(allocator=peak, ledger=self._ledger_peaks.get(phase, 0),
                                         untracked=peak - self._ledger_peaks.get(phase, 0))
                  for phase, peak in self._allocator_peaks.items()}
        return AllocatorFigures(ruler=self.ruler.name, locations=sorted(self.locations), current=current, ledger=self.counted,
                                untracked=current - self.counted, phases=phases)


class OpTransients:
    """What an op allocates and frees inside its kernel (a softmax's or a dropout's temporaries, an autograd
    kernel's workspace): the storage tracker sees only an op's outputs, the allocator sees everything.

    Around each op the tracker runs, the ruler's peak is reset; afterwards the ledger's figure at the op's
    highest moment is what it counted before the op plus all the allocator gained up to that moment. What of
    that the op's registered outputs do not explain is a transient, which `note(bytes)` sets into the ledger
    for that instant only. Collectives (c10d ops) are left out: they hand work to the backend's threads
    (comm/_gloo.py).
    """

    def __init__(self, beside: AllocatorBeside, note: Callable[[int], None]) -> None:
        self._beside, self._note = beside, note
        self._base = self._counted = 0

    def before(self) -> None:
        self._beside.fold_peak()
        self._beside.ruler.reset_peak()
        self._base, self._counted = self._beside.ruler.current_bytes(), self._beside.counted

    def after(self) -> None:
        highest = self._counted + self._beside.ruler.peak_bytes() - self._base
        transient = highest - self._beside.counted
        if transient > 0:
            self._note(transient)
