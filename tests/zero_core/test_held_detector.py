"""The stage-3 held-memory detector (zero_core/stage3/_held.py) waits out the backend's grace period for a
unit's gathered storage only until it has found that unit held: autograd holds it the same way every pass, and
waiting each time cost every training pass BACKEND_GRACE_S (DeepSpeed-Chat's LoRA linears at stage 3)."""
from __future__ import annotations

import weakref

import pytest
import torch
from zero_plugins import Category

from zero_core.memory import MemoryLedger
from zero_core.stage3 import _held


class _Clock:
    """Stands in for the time module in _held: each sleep moves the clock on, and is counted."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(_held, "time", fake)
    return fake


def _gathered(ledger: MemoryLedger, detector: _held.HeldMemoryDetector, name: str) -> torch.Tensor:
    """A unit's gathered buffer, counted and released; the caller keeps it alive, as autograd would."""
    buffer = torch.ones(4)
    ledger.register(buffer, Category.PARAM_GATHERED)
    detector.released(weakref.ref(buffer.untyped_storage()), name)
    return buffer


def test_a_unit_found_held_is_labelled_at_once_on_later_passes(clock: _Clock) -> None:
    ledger = MemoryLedger()
    detector = _held.HeldMemoryDetector(ledger)
    first = _gathered(ledger, detector, "layers.0")
    with pytest.warns(_held.HeldParametersWarning, match="layers.0"):
        detector.settle()
    assert clock.slept >= _held.BACKEND_GRACE_S  # the first time, the backend gets its grace period

    clock.slept = 0.0
    second = _gathered(ledger, detector, "layers.0")
    detector.settle()
    assert clock.slept == 0.0
    assert detector.held_units == ["layers.0", "layers.0"]
    assert ledger.current("param.gathered.held") == first.nbytes + second.nbytes
    assert ledger.current("param.gathered") == 0


def test_a_unit_not_found_held_before_still_gets_the_grace_period(clock: _Clock) -> None:
    ledger = MemoryLedger()
    detector = _held.HeldMemoryDetector(ledger)
    with pytest.warns(_held.HeldParametersWarning):
        kept = [_gathered(ledger, detector, "layers.0")]
        detector.settle()
    clock.slept = 0.0
    kept += [_gathered(ledger, detector, "layers.0"), _gathered(ledger, detector, "layers.1")]
    detector.settle()
    assert clock.slept >= _held.BACKEND_GRACE_S
    assert detector.held_units == ["layers.0", "layers.0", "layers.1"]
    assert ledger.current("param.gathered.held") == sum(buffer.nbytes for buffer in kept)
