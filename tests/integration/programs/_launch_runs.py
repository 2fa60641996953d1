"""Running one program under `zero launch` and under plain torchrun on DeepSpeed 0.19.8, and comparing losses.

Shared by the tests that run programs written for DeepSpeed unchanged (issue 34): tests/integration's
test_programs_under_zero_launch.py, test_run_clm_under_zero_launch.py and test_trl_under_zero_launch.py. Both
runs get 2 CPU ranks on gloo and OMP_NUM_THREADS=1; a failed run's assertion shows its ranks' abort lines and
first rank traceback.
"""
from __future__ import annotations

import os
import subprocess
import sys
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_zero

REAL_DEEPSPEED = PathFinder.find_spec("deepspeed") is not None
needs_deepspeed = pytest.mark.skipif(not REAL_DEEPSPEED, reason="DeepSpeed 0.19.8 (the reference peer) is not "
                                                                "installed; zero's runs are checked without it")
FP32_TOLERANCE = 2e-6
BF16_TOLERANCE = 2e-3
TESTS = Path(__file__).resolve().parents[2]
# The reference runner bench/programs_latency.py also uses: the program as its own __main__ on DeepSpeed, given
# --local_rank as DeepSpeed's launcher and zero launch give it, its process group ended after it.
ON_DEEPSPEED = TESTS.parent / "bench" / "programs" / "on_deepspeed.py"
# a stage-3 ds_config for the Trainer's --deepspeed, every value it fills in left "auto"
AUTO_STAGE3: dict[str, Any] = {
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto", "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto",
                          "stage3_gather_16bit_weights_on_model_save": True},
}


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


# What a rank that aborted (no Python traceback of its own) says before it dies.
_ABORT_MARKS = ("terminate called", "what():", "Fatal Python error", "Aborted", "gloo")


def failure(stderr: str) -> str:
    """A failed launch's abort messages, first rank traceback and torchrun's table: what the assertion shows."""
    lines = stderr.splitlines()
    aborts = [line for line in lines if any(mark in line for mark in _ABORT_MARKS)][:20]
    start = next((i for i, line in enumerate(lines) if "Traceback" in line), max(0, len(lines) - 40))
    return "\n".join(aborts + lines[start:start + 60] + lines[-25:])


def zero_launch(program: Path, *args: str, **env: str) -> None:
    """`zero launch --nproc_per_node 2 program args`, with `env` added to this process's environment."""
    result = run_zero("launch", "--nproc_per_node", "2", str(program), *args, timeout=150, OMP_NUM_THREADS="1",
                      **env)
    assert result.returncode == 0, failure(result.stderr)


def on_deepspeed(program: Path, *args: str, comm_first: bool = False, **env: str) -> None:
    """The same program under torchrun on DeepSpeed (DS_ACCELERATOR=cpu). `comm_first`: DeepSpeed's comm starts
    the process group first. A program whose TrainingArguments(use_cpu=True) let accelerate start it, and whose
    model is then built under DeepSpeed's zero.Init, needs that: DeepSpeed's Init reads its config before it
    starts its own comm, sees world size 1 and refuses the Trainer's train_batch_size (DeepSpeed's limitation)."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", **env}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           str(ON_DEEPSPEED), *(["--comm-first"] if comm_first else []), str(program), *args],
                          capture_output=True, text=True, timeout=220, env=environment)
    assert done.returncode == 0, failure(done.stderr)


def flat(losses: list[Any]) -> list[float]:
    return [value for entry in losses for value in (entry if isinstance(entry, list) else [entry])]


def assert_close(got: list[Any], want: list[Any], tolerance: float) -> float:
    """The largest difference between two runs' losses, asserted within `tolerance` (same count, not empty)."""
    got_flat, want_flat = flat(got), flat(want)
    assert len(got_flat) == len(want_flat) > 0
    worst = max(abs(a - b) for a, b in zip(got_flat, want_flat))
    assert worst <= tolerance, (worst, got, want)
    return worst
