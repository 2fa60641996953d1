"""fp16 loss scaling with DeepSpeed's semantics: hysteresis, window, minimum."""
from __future__ import annotations

import pytest
from zero_core.engine import DynamicLossScaler, LossScaler


def scaler(**overrides: object) -> DynamicLossScaler:
    settings = {"init_scale": 2.0**16, "scale_window": 3, "min_scale": 1.0, "hysteresis": 2}
    settings.update(overrides)
    return DynamicLossScaler(**settings)  # type: ignore[arg-type]


def test_hysteresis_delays_the_first_halving() -> None:
    s = scaler()
    s.update(overflow=True)
    assert s.scale == 2.0**16 and s.cur_hysteresis == 1
    s.update(overflow=True)
    assert s.scale == 2.0**15
    s.update(overflow=True)
    assert s.scale == 2.0**14


def test_a_window_of_clean_steps_doubles_the_scale() -> None:
    s = scaler(hysteresis=1)
    s.update(overflow=True)  # iteration 0 overflows
    scales = []
    for _ in range(7):
        s.update(overflow=False)
        scales.append(s.scale)
    # DeepSpeed counts the stable interval from the iteration after the overflow
    assert scales == [2.0**15, 2.0**15, 2.0**15, 2.0**16, 2.0**16, 2.0**16, 2.0**17]


def test_clean_steps_refill_hysteresis_only_with_the_window_unless_consecutive() -> None:
    s = scaler()
    s.update(overflow=True)
    s.update(overflow=False)
    assert s.cur_hysteresis == 1
    c = scaler(consecutive_hysteresis=True)
    c.update(overflow=True)
    c.update(overflow=False)
    assert c.cur_hysteresis == 2


def test_the_minimum_scale_is_a_floor_then_an_error() -> None:
    s = scaler(init_scale=4.0, min_scale=2.0, hysteresis=1)
    s.update(overflow=True)
    assert s.scale == 2.0
    with pytest.raises(FloatingPointError, match="minimum loss scale 2"):
        s.update(overflow=True)


def test_static_scale_never_moves_and_state_round_trips() -> None:
    static = LossScaler(128.0)
    static.update(overflow=True)
    assert static.scale == 128.0
    s = scaler()
    s.update(overflow=True)
    t = scaler()
    t.load_state_dict(s.state_dict())
    assert (t.scale, t.cur_hysteresis, t.cur_iter) == (s.scale, s.cur_hysteresis, s.cur_iter)
