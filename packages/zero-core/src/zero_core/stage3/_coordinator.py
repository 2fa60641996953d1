"""When units are gathered and freed: reference counts, the traced order, prefetch and the live cap.

- `acquire(unit)` makes a unit's parameters available (gathering it, or waiting for its
  prefetch) for one user; `release(unit)` ends that use, and the last release frees it unless
  the trace says it is reused within `stage3_max_reuse_distance` elements.
- Within a pass (forward or backward) every acquisition is recorded. The next pass of the
  same kind follows that record: on each acquisition, the units that come next are gathered
  ahead, asynchronously, while the elements gathered ahead and not yet used stay within
  `stage3_prefetch_bucket_size`. A pass that departs from the record stops prefetching and
  becomes the new record (the model's control flow changed).
- Every gathered element counts against `stage3_max_live_parameters`: prefetching never
  exceeds it and kept units are freed to make room. An acquisition that cannot fit even
  then is gathered anyway, past the cap, with one warning per engine (_live_cap.py): as in
  DeepSpeed, the cap bounds prefetch and reuse, never the module about to run.
- The end of a pass frees every unit, so nothing gathered outlives forward or backward.

All decisions depend only on the order of acquisitions, never on timing, so every rank
issues the same collectives in the same order.
"""
from __future__ import annotations

import enum
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from ._held import HeldMemoryDetector
from ._live_cap import LiveCapWarnings
from ._unit import ParamUnit


class PassKind(enum.Enum):
    FORWARD = "forward"
    BACKWARD = "backward"


# Which coordinator gathers each unit: units need no pointer back (as FSDP2's FSDPParam has none to its group).
# Weak both ways: the coordinator holds its units, so a strong value would keep every key alive for the life
# of the process (a destroyed engine's partitions stayed allocated: the allocator showed them, issue #20).
_owners: weakref.WeakKeyDictionary[ParamUnit, weakref.ref[GatherCoordinator]] = weakref.WeakKeyDictionary()


def owner_of(unit: ParamUnit) -> GatherCoordinator | None:
    """The engine's coordinator that gathers `unit`; None for a zero_core.Init unit no engine owns yet."""
    owner = _owners.get(unit)
    return owner() if owner is not None else None


class GatherCoordinator:
    def __init__(
        self, held: HeldMemoryDetector, prefetch_numel: int, max_live_numel: int, max_reuse_numel: int
    ) -> None:
        self.held = held
        self.prefetch_numel = prefetch_numel
        self.max_live_numel = max_live_numel
        self.over_cap = LiveCapWarnings(max_live_numel)
        self.max_reuse_numel = max_reuse_numel
        self.live_numel = 0  # padded elements of every gathered (or in-flight) buffer
        self.peak_live_numel = 0
        self.prefetched = 0  # units gathered ahead of their use (a figure for tests and reports)
        self._gathered: dict[ParamUnit, None] = {}  # insertion-ordered set
        self._ahead: dict[ParamUnit, None] = {}  # prefetched, not yet acquired
        self._kept: dict[ParamUnit, None] = {}  # released but kept for reuse, oldest first
        self._traces: dict[PassKind, list[ParamUnit]] = {}
        self._record: list[ParamUnit] = []
        self._trace: list[ParamUnit] = []
        self._pass: PassKind | None = None
        self._following = False
        self._soon: list[ParamUnit] = []  # releases put off by release_soon
        self.read_ahead_units = 0  # units past the gathering window whose swapped partitions are read ahead

    def adopt(self, units: list[ParamUnit]) -> None:
        for unit in units:
            _owners[unit] = weakref.ref(self)
        self.over_cap.adopt(units)

    def owns(self, unit: ParamUnit) -> bool:
        return owner_of(unit) is self

    # --- passes ---
    @contextmanager
    def pass_(self, kind: PassKind) -> Iterator[None]:
        """One forward or backward: record acquisitions, follow the last record, free everything at the end."""
        outer = self._pass
        if outer is not None:  # engine(...) called from inside the model: still one pass
            yield
            return
        self._pass, self._record = kind, []
        self._trace = self._traces.get(kind, [])
        self._following = bool(self._trace)
        try:
            yield
        finally:
            self._traces[kind] = self._record
            self._pass = None
            self.free_all()

    @property
    def in_backward(self) -> bool:
        return self._pass is PassKind.BACKWARD

    def free_all(self) -> None:
        self._soon.clear()
        for unit in list(self._gathered):
            unit.users = 0
            self._free(unit)
        for unit in self._trace:
            unit.cancel_read()  # reads ahead for a pass that ended early hold buffers the step needs
        self.held.settle()

    # --- uses ---
    def acquire(self, unit: ParamUnit) -> None:
        position = len(self._record)
        if self._pass is not None:
            self._record.append(unit)
            if self._following and (position >= len(self._trace) or self._trace[position] is not unit):
                self._following = False
        if not unit.gathered:
            self._make_room(unit)
            self._gather(unit)
        self._ahead.pop(unit, None)
        self._kept.pop(unit, None)
        unit.wait()
        unit.users += 1
        if self._following:
            self._prefetch(position + 1)

    def release_soon(self, unit: ParamUnit) -> None:
        """Release when backward next gathers or releases for a module (`release_put_off`), not now.

        For a forward that activation checkpointing re-runs inside backward: the checkpoint
        compares what the re-run saved (here the parameters themselves) with the first
        forward once the whole re-run has returned, so the parameters must still be whole then.
        """
        self._soon.append(unit)

    def release_put_off(self) -> None:
        soon, self._soon = self._soon, []
        for unit in soon:
            self.release(unit)

    def release(self, unit: ParamUnit) -> None:
        if unit.users == 0:
            return  # already freed by the end of a pass
        unit.users -= 1
        if unit.users > 0:
            return
        if self._reused_soon(unit):
            self._kept[unit] = None
        else:
            self._free(unit)

    @contextmanager
    def available(self, unit: ParamUnit) -> Iterator[None]:
        self.acquire(unit)
        self.release_put_off()
        try:
            yield
        finally:
            self.release(unit)

    # --- policy ---
    def _reused_soon(self, unit: ParamUnit) -> bool:
        if not self._following:
            return False
        distance = 0
        for upcoming in self._trace[len(self._record) :]:
            if upcoming is unit:
                return distance <= self.max_reuse_numel and self.live_numel <= self.max_live_numel
            distance += upcoming.numel
            if distance > self.max_reuse_numel:
                return False
        return False

    def _prefetch(self, start: int) -> None:
        ahead = sum(unit.numel for unit in self._ahead)
        upcoming = self._trace[start:]
        for index, unit in enumerate(upcoming):
            if unit.gathered:
                continue
            if ahead + unit.numel > self.prefetch_numel or self.live_numel + unit.numel > self.max_live_numel:
                self._read_ahead(upcoming[index:])
                return
            self._gather(unit)
            self._ahead[unit] = None
            self.prefetched += 1
            ahead += unit.numel

    def _read_ahead(self, upcoming: list[ParamUnit]) -> None:
        """Beyond the gathering window, start reading partitions in swap space while buffers are free."""
        for unit in upcoming[: self.read_ahead_units]:
            if not unit.read_ahead():
                return

    def _make_room(self, unit: ParamUnit) -> None:
        for idle in (self._kept, self._ahead):
            while idle and self.live_numel + unit.numel > self.max_live_numel:
                self._free(next(iter(idle)))
        if self.live_numel + unit.numel > self.max_live_numel:
            self.over_cap.beyond_cap(unit, self.live_numel)  # what is left is in use: gathered past the cap

    # --- bookkeeping ---
    def _gather(self, unit: ParamUnit) -> None:
        unit.start_gather()
        self._gathered[unit] = None
        self.live_numel += unit.numel
        self.peak_live_numel = max(self.peak_live_numel, self.live_numel)

    def _free(self, unit: ParamUnit) -> None:
        self._ahead.pop(unit, None)
        self._kept.pop(unit, None)
        self._gathered.pop(unit, None)
        self.live_numel -= unit.numel
        self.held.released(unit.free(), unit.name)
