"""The memory ledger: bytes held by the engine, by category, current and peak, per location.

Engine-owned buffers are registered under a category, and a location (the device, host
memory pinned or not, or NVMe; see placement.py), when they are allocated. Each
storage is counted once (views share their base's storage) and uncounted when a weak
reference says it died, so the figures follow the real lifetime of the memory, not the
engine's intentions. With tracking on, a StorageTracker sees every other storage made
inside the engine's forward, backward and step, and the ledger files it under
`activations` (made in forward or backward) or `other` (made elsewhere, e.g. the
optimizer's temporaries). docs/ledger.md describes each category.
"""
from __future__ import annotations


import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from zero_plugins import UNOWNED_CATEGORIES, Category

from .levers import LeverSetup
from .placement import Placement, location
from .report import CommCount, MemoryReport
from .ruler import AllocatorBeside, AllocatorFigures, AllocatorRuler, OpTransients, PhaseAllocation
from .tracker import StorageTracker

if TYPE_CHECKING:
    from zero_pin import PinnedMemoryStats

# Phases whose new anonymous storages are activations (or their gradients).
_ACTIVATION_PHASES = frozenset({"forward", "backward"})


@dataclass
class _Entry:
    ref: weakref.ref[torch.UntypedStorage]
    category: Category
    location: str
    nbytes: int
    counted: bool  # among the allocator's bytes (the ruler's)


class MemoryLedger:
    """Current and peak bytes per (location, category), plus bytes sent through collectives.

    A location is the device type ("cpu", "cuda") for memory on the device, "host" or
    "host.pinned" for offloaded host memory, "nvme" for swap files.
    """

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self._extents: dict[int, weakref.finalize[[], object]] = {}
        self._current: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._peak: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._total: dict[str, int] = defaultdict(int)
        self._total_peak: dict[str, int] = defaultdict(int)
        # What each category held at the moment each location's total peaked (peaks of categories apart
        # may fall at different moments; this says what made the peak itself).
        self._at_peak: dict[str, dict[str, int]] = {}
        # Per phase ("forward", "backward", "step"), per location: what each category held when the
        # location's total was highest inside that phase, over every run of it (what `zero profile` shows).
        self._phase_peaks: dict[str, dict[str, dict[str, int]]] = {}
        self._comm: dict[str, CommCount] = {}
        self._tracker: StorageTracker | None = None
        self._label: Category | None = None
        self._phase = "idle"
        self._outer_phase: str | None = None
        self._allocator: AllocatorBeside | None = None

    # --- engine-owned buffers ---
    def register(self, tensor: torch.Tensor, category: Category, placement: Placement = Placement.DEVICE,
                 pinned: bool = False) -> torch.Tensor:
        """Count `tensor`'s storage under `category` at its location until it dies; a storage already
        counted is left as is.

        A storage first seen by the tracker (as activations/other) moves to `category` and the location
        (also from one unowned category's device line to its host line).
        """
        category = _check_category(category)
        if tensor.device.type == "meta":
            return tensor
        storage = tensor.untyped_storage()
        where = location(placement, tensor.device.type, pinned)
        entry = self._entries.get(storage._cdata)
        if entry is not None and entry.ref() is storage:
            # A storage the tracker saw first moves to an owned category, or to where it really lives
            # (activations copied to host memory are made inside forward, so the tracker files them at the device).
            if entry.category in UNOWNED_CATEGORIES and (category not in UNOWNED_CATEGORIES or where != entry.location):
                self._move(entry, category, where)
            return tensor
        self._add(storage, where, category)
        return tensor

    def new(self, category: Category, make: Callable[[], torch.Tensor], placement: Placement = Placement.DEVICE,
            pinned: bool = False) -> torch.Tensor:
        """Run `make()` (one allocation) and register its result; while tracking, its storage is labelled at birth."""
        category = _check_category(category)
        previous, self._label = self._label, category
        try:
            tensor = make()
        finally:
            self._label = previous
        return self.register(tensor, category, placement, pinned)

    def register_extent(self, owner: object, category: Category, placement: Placement, nbytes: int,
                        device: str = "cpu") -> None:
        """Count `nbytes` that are not a tensor we hold (a swap file's bytes) under `category` at `placement` on
        `device`, until `owner` dies or `release_extent(owner)` is called. The allocator never counts them."""
        category = _check_category(category)
        where = location(placement, device, pinned=False)
        self._change(where, category, nbytes)
        self._change_total(where, nbytes)

        key = id(owner)

        def uncount() -> None:
            self._extents.pop(key, None)
            self._change(where, category, -nbytes)
            self._total[where] -= nbytes

        self._extents[key] = weakref.finalize(owner, uncount)

    def release_extent(self, owner: object) -> None:
        finalizer = self._extents.pop(id(owner), None)
        if finalizer is not None:
            finalizer()

    def relabel(self, storage: torch.UntypedStorage, category: Category) -> None:
        """Move a counted storage to another category (stage 3 files gathered weights found still alive as held)."""
        category = _check_category(category)
        entry = self._entries.get(storage._cdata)
        if entry is not None and entry.ref() is storage:
            self._move(entry, category, entry.location)

    def relocate(self, storage: torch.UntypedStorage, placement: Placement, pinned: bool = False) -> None:
        """Count a storage's bytes at another location, in its category: `engine.offload_states()` copied them to
        host memory and emptied the storage, `reload_states()` brings them back."""
        entry = self._entries.get(storage._cdata)
        if entry is not None and entry.ref() is storage:
            self._move(entry, entry.category, location(placement, storage.device.type, pinned))

    # --- the allocator, the ruler ---
    def set_ruler(self, ruler: AllocatorRuler | None) -> None:
        """Set the allocator's figures beside the ledger's (memory/ruler.py); storages registered from now
        on are marked as counted by it or not. Phase peaks are measured at the allocator while tracking."""
        if ruler is None:
            self._allocator = None
            return
        self._allocator = AllocatorBeside(ruler)
        self._probe_transients()
        for entry in self._entries.values():
            storage = entry.ref()
            entry.counted = storage is not None and ruler.counts(storage)
            if entry.counted:
                self._allocator.change(entry.location, entry.nbytes)

    def _probe_transients(self) -> None:
        if self._tracker is not None and self._allocator is not None:
            self._tracker.set_probe(OpTransients(self._allocator, self._note_transient))

    def _note_transient(self, nbytes: int) -> None:
        """An op's kernel held `nbytes` beyond its outputs for a moment: in the phase's peaks for that instant."""
        if self._outer_phase is None or self._allocator is None:
            return
        where = self._allocator.ruler.device  # kernels run on the device the ruler counts
        label = Category.ACTIVATIONS if self._phase in _ACTIVATION_PHASES else Category.OTHER
        self._allocator.change(where, nbytes)
        self._change(where, label, nbytes)
        self._change_total(where, nbytes)
        self._allocator.change(where, -nbytes)
        self._change(where, label, -nbytes)
        self._total[where] -= nbytes

    @property
    def ruler(self) -> AllocatorRuler | None:
        return self._allocator.ruler if self._allocator is not None else None

    def allocator_now(self) -> PhaseAllocation | None:
        """The allocator's bytes beside the ledger's counted bytes at this instant; None without a ruler."""
        return self._allocator.now() if self._allocator is not None else None

    def allocator_figures(self) -> AllocatorFigures | None:
        """The allocator now and per phase beside the ledger's counted bytes, with `untracked`; None without a ruler."""
        return self._allocator.figures() if self._allocator is not None else None

    # --- communication ---
    def count_comm(self, op: str, payload_bytes: int, sent_bytes: int) -> None:
        """One collective: `payload_bytes` is the tensor handed to it, `sent_bytes` what this rank sends."""
        count = self._comm.setdefault(op, CommCount())
        count.calls += 1
        count.payload_bytes += payload_bytes
        count.sent_bytes += sent_bytes

    # --- tracking anonymous storages ---
    @property
    def tracking(self) -> bool:
        return self._tracker is not None

    def set_tracking(self, enabled: bool) -> None:
        """Attribute storages the engine does not own inside its phases (costs a dispatch hook per op)."""
        if enabled and self._tracker is None:
            self._tracker = StorageTracker()
            self._tracker.add_listener(self._on_new_storage)
            self._probe_transients()
        elif not enabled:
            self._tracker = None

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Mark a phase of training ("forward", "backward", "step"); tracks storages inside it when tracking."""
        previous, self._phase = self._phase, name
        tracker = self._tracker
        outermost = previous == "idle"
        if outermost:
            self._outer_phase = name
            for where in self._current:  # what is held on entry counts, even if nothing is allocated inside
                self._note_phase_peak(where)
        measuring = outermost and tracker is not None and self._allocator is not None
        if measuring:
            assert self._allocator is not None
            self._allocator.begin_phase(name)  # resets the allocator's peak: only while tracking (docs/ledger.md)
        try:
            if tracker is None or not outermost:
                yield
            else:
                with tracker:
                    yield
        finally:
            self._phase = previous
            if outermost:
                self._outer_phase = None
            if measuring:
                assert self._allocator is not None
                self._allocator.end_phase()

    # --- figures, per location ("cpu" is the CPU accelerator's device memory) ---
    def current(self, category: str, location: str = "cpu") -> int:
        return self._current[location][category]

    def peak(self, category: str, location: str = "cpu") -> int:
        return self._peak[location][category]

    def total(self, location: str = "cpu") -> int:
        return self._total[location]

    def total_peak(self, location: str = "cpu") -> int:
        return self._total_peak[location]

    def locations(self) -> list[str]:
        """Every location that has held memory."""
        return sorted(self._current)

    def reset_peaks(self) -> None:
        for where, categories in self._current.items():
            for category, value in categories.items():
                self._peak[where][category] = value
            self._total_peak[where] = self._total[where]
            self._at_peak[where] = {category: value for category, value in categories.items() if value}

    def phase_peaks(self) -> dict[str, dict[str, dict[str, int]]]:
        """`{phase: {location: {category: bytes, ..., "total": bytes}}}` at each location's highest total
        inside each phase, since the ledger was made or `reset_phase_peaks()`; phases nest into the outer one."""
        return {phase: {where: dict(held) for where, held in locations.items()}
                for phase, locations in self._phase_peaks.items()}

    def reset_phase_peaks(self) -> None:
        self._phase_peaks = {}
        if self._allocator is not None:
            self._allocator.reset_phases()

    def snapshot(self) -> dict[str, dict[str, int]]:
        """`{location: {category: bytes, ..., "total": bytes}}` held now."""
        return {where: {**{c: v for c, v in categories.items() if v}, "total": self._total[where]}
                for where, categories in sorted(self._current.items()) if self._total[where]}

    def report(self, pinned: PinnedMemoryStats | None = None, setup: LeverSetup | None = None,
               pinning: list[dict[str, int]] | None = None) -> MemoryReport:
        memory: dict[str, dict[str, dict[str, int]]] = {}
        for where in sorted(self._current):
            rows: dict[str, dict[str, int]] = {
                category: {"current": self._current[where][category], "peak": self._peak[where][category]}
                for category in Category
                if self._peak[where][category] > 0
            }
            rows["total"] = {"current": self._total[where], "peak": self._total_peak[where]}
            memory[where] = rows
        comm = {op: count.as_dict() for op, count in sorted(self._comm.items())}
        at_peak = {where: dict(categories) for where, categories in sorted(self._at_peak.items())}
        return MemoryReport(memory, comm=comm, pinned=pinned, tracked=self.tracking, at_peak=at_peak, setup=setup,
                            allocator=self.allocator_figures(), pinning=pinning)

    # --- bookkeeping ---
    def _on_new_storage(self, storage: torch.UntypedStorage, device: str) -> None:
        # Storages the engine did not allocate (activations, temporaries) are on the device.
        entry = self._entries.get(storage._cdata)
        if entry is not None and entry.ref() is storage:
            return
        label = self._label or (Category.ACTIVATIONS if self._phase in _ACTIVATION_PHASES else Category.OTHER)
        self._add(storage, device, label)

    def _add(self, storage: torch.UntypedStorage, where: str, category: Category) -> None:
        key = storage._cdata
        nbytes = storage.nbytes()
        ref = weakref.ref(storage, lambda dead: self._on_free(key, dead))
        counted = self._allocator is not None and self._allocator.ruler.counts(storage)
        self._entries[key] = _Entry(ref, category, where, nbytes, counted)
        if counted:
            assert self._allocator is not None
            self._allocator.change(where, nbytes)
        self._change(where, category, nbytes)
        self._change_total(where, nbytes)

    def _move(self, entry: _Entry, category: Category, where: str) -> None:
        self._change(entry.location, entry.category, -entry.nbytes)
        self._change_total(entry.location, -entry.nbytes)
        entry.category, entry.location = category, where
        if entry.counted and self._allocator is not None:
            self._allocator.locations.add(where)
        self._change(where, category, entry.nbytes)
        self._change_total(where, entry.nbytes)

    def _change_total(self, where: str, delta: int) -> None:
        self._total[where] += delta
        if self._total[where] > self._total_peak[where] or where not in self._at_peak:
            self._total_peak[where] = self._total[where]
            self._at_peak[where] = {category: value for category, value in self._current[where].items() if value}
        if delta > 0 and self._outer_phase is not None:
            self._note_phase_peak(where)

    def _note_phase_peak(self, where: str) -> None:
        assert self._outer_phase is not None
        held = self._phase_peaks.setdefault(self._outer_phase, {}).get(where)
        if held is None or self._total[where] > held["total"]:
            snapshot = {category: value for category, value in self._current[where].items() if value}
            self._phase_peaks[self._outer_phase][where] = {**snapshot, "total": self._total[where]}

    def _on_free(self, key: int, dead: weakref.ref[torch.UntypedStorage]) -> None:
        entry = self._entries.get(key)
        if entry is None or entry.ref is not dead:
            return
        del self._entries[key]
        if entry.counted and self._allocator is not None:
            self._allocator.change(entry.location, -entry.nbytes)
        self._change(entry.location, entry.category, -entry.nbytes)
        self._total[entry.location] -= entry.nbytes

    def _change(self, where: str, category: Category, delta: int) -> None:
        current = self._current[where]
        current[category] += delta
        peak = self._peak[where]
        peak[category] = max(peak[category], current[category])


def _check_category(category: Category) -> Category:
    """The member for `category`; a plugin may pass the name ("optim.master"), an unknown one is a ValueError."""
    return Category.named(category)
