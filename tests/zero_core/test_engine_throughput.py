"""`engine.tput_timer` (engine/_throughput.py, DeepSpeed's ThroughputTimer) and the engine attributes the HF Trainer
and accelerate read (`engine.config`, `steps_per_print()`, `compile()` refused), on one rank.

The timer counts every `step()` as a micro-step and every boundary as a global step; the first two optimizer steps
are not timed (DeepSpeed's `start_step=2`). Timed steps are measured: a forward that sleeps 50 ms makes each timed
step last at least that, and `avg_samples_per_sec()` is `train_batch_size / mean step time`. DeepSpeed-Chat's
`update_epoch_count()` resets the micro-step count. Rank 0 logs DeepSpeed's line every `steps_per_print` timed
steps.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import torch
from zero_plugins import ZeroError

from engine_helpers import WarningRecords

SLEEP_S = 0.05


class Slow(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(SLEEP_S)  # a known lower bound on the step's time
        return self.layer(x)


def _config() -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "steps_per_print": 2,
            "optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "zero_optimization": {"stage": 2}}


class InfoRecords(WarningRecords):
    def __init__(self) -> None:
        super().__init__()
        self.setLevel(logging.INFO)


def test_tput_timer_counts_times_and_reports_steps(solo_process_group: None) -> None:
    import zero_core

    torch.manual_seed(0)
    config = _config()
    engine, _, _, _ = zero_core.initialize(model=Slow(), config=config)
    timer = engine.tput_timer
    assert engine.config is config, "DeepSpeed's engine.config: the ds_config as given"
    assert engine.config.get("zero_optimization", {}).get("stage") == 2, "what the HF Trainer reads"
    assert engine.steps_per_print() == 2
    assert timer.avg_samples_per_sec() == float("-inf"), "no step timed yet"
    records = InfoRecords()
    logger = logging.getLogger("zero_core.engine")
    logger.addHandler(records)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        for micro in range(8):
            engine.backward(engine(torch.randn(2, 4)).pow(2).mean())
            engine.step()
            if micro == 3:
                assert (timer.global_step_count, timer.total_elapsed_time) == (2, 0.0), "two warm-up steps untimed"
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    assert (timer.micro_step_count, timer.global_step_count) == (8, 4)
    # steps 3 and 4 are timed: 2 micro-batches each, every forward sleeping SLEEP_S
    assert timer.total_elapsed_time >= 4 * SLEEP_S
    assert timer.avg_samples_per_sec() == pytest.approx(engine.train_batch_size() / (timer.total_elapsed_time / 2))
    assert timer.avg_samples_per_sec() <= engine.train_batch_size() / (2 * SLEEP_S)
    reports = [m for m in records.messages if m.startswith("epoch=")]
    # every steps_per_print=2 steps, once timed (step 2 is still warm-up, as in DeepSpeed)
    assert [m.split(", ")[0] for m in reports] == ["epoch=0/micro_step=8/global_step=4"]
    timer.update_epoch_count()
    assert (timer.epoch_count, timer.micro_step_count) == (1, 0)
    timer.start()  # a client's own span, as DeepSpeed-Chat's step 3 does
    time.sleep(SLEEP_S)
    before = timer.total_elapsed_time
    timer.stop()
    assert timer.total_elapsed_time - before >= SLEEP_S
    assert (timer.micro_step_count, timer.global_step_count) == (1, 4), "not an optimizer step"
    timer.stop()
    assert timer.micro_step_count == 1, "a stop without a start counts nothing"
    engine.destroy()


def test_engine_compile_is_refused_by_name(solo_process_group: None) -> None:
    import zero_core

    engine, _, _, _ = zero_core.initialize(model=torch.nn.Linear(4, 1), config=_config())
    with pytest.raises(ZeroError, match=r"^engine.compile\(\) \(DeepSpeed's torch.compile of the engine\) is not "
                                        r"supported by zero; run without it \(accelerate: dynamo_backend 'no', the "
                                        r"Trainer: torch_compile=False\)$"):
        engine.compile(backend="inductor", compile_kwargs={})
    engine.destroy()
