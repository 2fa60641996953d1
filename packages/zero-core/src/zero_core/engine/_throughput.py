"""`engine.tput_timer`: DeepSpeed's ThroughputTimer, timing the engine's steps for programs that read it.

The engine starts it in `forward` (DeepSpeed: in its data loader's `next`, when it built one) and
stops it at the end of `step`; a program may call `start()` / `stop()` itself, as DeepSpeed-Chat does, and reads
`avg_samples_per_sec()`, `total_elapsed_time` and the counts. As in DeepSpeed the first
`start_step` optimizer steps (warm-up) are counted but not timed, and rank 0 logs a line every
`steps_per_print` steps. The accelerator is synchronized at both ends (DeepSpeed's
`timers.throughput.synchronized` default), so the time covers the queued device work.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger("zero_core.engine")


class ThroughputTimer:
    def __init__(self, batch_size: int, *, synchronize: Callable[[], None], start_step: int = 2,
                 steps_per_output: int | None = None) -> None:
        """`batch_size`: samples per optimizer step (the engine's `train_batch_size()`)."""
        self._synchronize = synchronize
        self.batch_size, self.start_step, self.steps_per_output = batch_size, start_step, steps_per_output
        self.started = self.initialized = False
        self.start_time = self.end_time = 0.0  # wall-clock seconds (time.time), 0: not timing
        self.epoch_count = self.micro_step_count = self.global_step_count = 0
        self.total_elapsed_time = 0.0  # seconds over the timed steps (those from start_step on)
        self.step_elapsed_time = 0.0  # seconds since the last optimizer step

    def update_epoch_count(self) -> None:
        self.epoch_count += 1
        self.micro_step_count = 0

    def start(self) -> None:
        self.initialized = True
        self.started = True
        if self.global_step_count >= self.start_step:
            self._synchronize()
            self.start_time = time.time()

    def stop(self, global_step: bool = False, report_speed: bool = True) -> None:
        """End the span `start()` began; `global_step`: the span ended an optimizer step."""
        if not self.started:
            return
        self.started = False
        self.micro_step_count += 1
        if global_step:
            self.global_step_count += 1
        if self.start_time <= 0:  # still warming up: counted, not timed
            return
        self._synchronize()
        self.end_time = time.time()
        duration = self.end_time - self.start_time
        self.total_elapsed_time += duration
        self.step_elapsed_time += duration
        if not global_step:
            return
        if report_speed and self.steps_per_output is not None and self.global_step_count % self.steps_per_output == 0:
            log.info("epoch=%d/micro_step=%d/global_step=%d, RunningAvgSamplesPerSec=%s, CurrSamplesPerSec=%s",
                     self.epoch_count, self.micro_step_count, self.global_step_count, self.avg_samples_per_sec(),
                     self.batch_size / max(self.step_elapsed_time, 1e-9))
        self.step_elapsed_time = 0.0

    def avg_samples_per_sec(self) -> float:
        """Samples per second over the timed steps; -inf before any (DeepSpeed divides by zero at exactly
        `start_step` steps: here that is -inf too)."""
        timed = self.global_step_count - self.start_step
        if timed <= 0 or self.total_elapsed_time <= 0:
            return float("-inf")
        return self.batch_size / (self.total_elapsed_time / timed)
