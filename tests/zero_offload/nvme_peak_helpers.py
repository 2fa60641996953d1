"""Shared by the NVMe allocator-peak tests: every stage and offload device on ranks that count the CPU allocator.

Each test module gives a `run(rank, stage, device, nvme_path)` of its own; this runs it at stages 2 and 3 with
`cpu` and `nvme` offload, one after the other in the same ranks, waiting for each run's memory to come back.
"""
from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from multirank import run_ranks
from swap_helpers import direct_directory

Run = Callable[[int, int, str, str], dict[str, Any]]
Found = dict[tuple[int, str], dict[str, Any]]


def settle_host_memory(baseline: int) -> None:
    """Wait until the previous run's memory is back (gloo's threads drop communicated tensors a moment late)."""
    import zero_pin

    deadline = time.monotonic() + 5
    while zero_pin.host_allocator_stats()["current"] > baseline and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)


def each_stage_and_device(rank: int, world_size: int, run: Run, nvme_path: str) -> Found:
    import zero_pin
    from zero_core.accelerator import get_accelerator

    get_accelerator().count_allocations()
    baseline = zero_pin.host_allocator_stats()["current"]
    found = {}
    for stage in (2, 3):
        for device in ("cpu", "nvme"):
            settle_host_memory(baseline)
            found[stage, device] = run(rank, stage, device, nvme_path)
    return found


def counted_runs(tmp_path_factory: pytest.TempPathFactory, name: str, run: Run, world_size: int,
                 timeout: float) -> Iterator[list[Found]]:
    """A module fixture's body: `run` at every stage and device, per rank, swapping under a fresh directory."""
    from zero_pin._native_build import COUNTING_ALLOCATOR_OP

    COUNTING_ALLOCATOR_OP.load()  # built once here (not counting: nothing is installed); the ranks load it
    for root in direct_directory(tmp_path_factory.mktemp(name)):
        yield run_ranks(each_stage_and_device, world_size, run, str(Path(root)), timeout=timeout)
