"""`zero profile` (a real run) refuses a model whose ranks cannot fit in this host's memory, with the figures,
before any rank starts: needed (ranks x the estimate's host peak per rank) against MemAvailable."""
from __future__ import annotations

import re

import pytest
from zero_core.accelerator import host_memory_available
from zero_core.profile._precheck import host_bytes, host_memory_problem

from cli_helpers import run_main

GIB = 1 << 30
ESTIMATE = {"phases": {"init": {"gpu": 5 * GIB, "cpu": 3 * GIB, "pinned": GIB, "nvme": 40 * GIB},
                       "step": {"gpu": 9 * GIB, "cpu": 0, "pinned": 0, "nvme": 0}}}


def test_a_rank_holds_the_estimates_host_lines_and_on_cpu_its_device_lines() -> None:
    assert host_bytes(ESTIMATE, "cpu") == 9 * GIB  # step: the device is this host
    assert host_bytes(ESTIMATE, "cuda") == 4 * GIB  # init: host and pinned; NVMe is never host memory


def test_the_refusal_gives_needed_available_and_the_fix() -> None:
    assert host_memory_problem(3 * GIB, 2, 6 * GIB, "stage 2") is None  # exactly fits
    assert host_memory_problem(3 * GIB, 2, 6 * GIB - 1, "stage 3, 7,000 parameters") == (
        "2 ranks on this host need 6.00 GiB of host memory (2 x 3.00 GiB, the estimate's peak per rank at stage 3, "
        "7,000 parameters), but 6.00 GiB is available (MemAvailable); use fewer ranks (--nproc), answer it with "
        "--dry-run (which needs no memory for the model), or profile a smaller model (--model)")
    assert host_memory_problem(3 * GIB, 1, GIB, "stage 0").startswith("1 rank on this host need 3.00 GiB")


def test_a_model_that_cannot_fit_is_refused_before_any_rank_starts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, "profile", "--model", "llama-2-70b", "--stages", "2,3", "--nproc", "2")
    assert (code, out) == (2, "")
    assert "zero profile:" not in err  # no progress line: nothing was built or launched
    found = re.fullmatch(
        r"zero: error: zero profile --model llama-2-70b: 2 ranks on this host need ([\d,.]+) GiB of host memory "
        r"\(2 x ([\d,.]+) GiB, the estimate's peak per rank at stage (\d), 68,976,648,192 parameters\), but "
        r"([\d,.]+) GiB is available \(MemAvailable\); use fewer ranks \(--nproc\), answer it with --dry-run \(which "
        r"needs no memory for the model\), or profile a smaller model \(--model\)\n", err)
    assert found is not None, err
    needed, per_rank, stage, available = found.groups()
    assert stage == "2"  # stage 2 holds every parameter on every rank: the worse of the two
    assert abs(float(needed.replace(",", "")) - 2 * float(per_rank.replace(",", ""))) <= 0.01
    assert abs(float(available.replace(",", "")) - host_memory_available() / GIB) < 2  # read at that moment
