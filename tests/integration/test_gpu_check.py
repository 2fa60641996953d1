"""`make gpu-check` (bench/gpu_check.py) where there is no GPU: one line saying nothing was checked, exit 2.

Its checks run on a GPU only (docs/benchmarks.md, "GPU check"); `--rehearse-on-cpu` runs them on the CPU
accelerator to test the script, which is slower than a unit test and left to the bench.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here: the check would run")
def test_without_a_gpu_it_says_nothing_was_checked_and_exits_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--json", str(tmp_path / "out.json")], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device here" in lines[0] and "nothing was checked" in lines[0], lines
    assert "--rehearse-on-cpu" in lines[0] and done.stdout == "" and not (tmp_path / "out.json").exists()
