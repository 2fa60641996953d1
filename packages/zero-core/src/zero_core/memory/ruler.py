"""The allocator beside the ledger: what torch's allocator counts, and how much of it the ledger explains.

The allocator is the ruler (DESIGN.md, "Memory truth"): on CUDA the caching allocator's statistics, on
CPU zero-pin's exact count of the CPU allocator. The ledger explains that figure by category; what it
does not explain is `untracked` = allocator - the ledger's bytes that the allocator counts (not pinned
host memory from its own allocator, not swap files, not storages allocated before the count began).
Per phase the two peaks are set side by side: the allocator's peak (reset as the phase begins) and the
highest the ledger's counted bytes reached inside it.
"""
from __future__ import annotations

from typing import Protocol, TypedDict

import torch


class AllocatorRuler(Protocol):
    """An allocator's exact figures for one device; accelerators provide it (Accelerator.allocator_ruler)."""

    @property
    def name(self) -> str:
        """What counts, for reports: "CPU allocator count", "CUDA caching allocator"."""
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

    def begin_phase(self, phase: str) -> None:
        self._phase = phase
        self.ruler.reset_peak()
        self._ledger_peaks[phase] = max(self._ledger_peaks.get(phase, 0), self.counted)

    def end_phase(self) -> None:
        if self._phase is not None:
            peak = self.ruler.peak_bytes()
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
