"""`zero profile --dry-run` checks every setting before it traces any, and runs DeepSpeed issue #4305's config.

A setting the estimator refuses (zero_estimate_check) or `initialize` refuses for its config alone
fails in one line with exit status 2 before any model is built: no progress line is printed, though
the refused setting comes after one that would have been traced. #4305's DeepSpeed-Chat config (fp16,
no optimizer block, `stage3_max_live_parameters` 3e7, its activation_checkpointing block) runs, with a
note for each thing of it the profile reads as DeepSpeed-Chat's script would.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_zero

ISSUE_4305 = Path(__file__).parents[1] / "zero_plugins" / "configs" / "stage3_deepspeed_issue_4305.json"
PROGRESS = "zero profile --dry-run:"  # every line a dry run prints once it starts building or tracing

REFUSED = {
    "estimator: offloads pinned differently": (
        {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "pin_memory": False},
                               "offload_optimizer": {"device": "cpu", "pin_memory": True}}},
        "zero: error: zero_optimization.offload_param.pin_memory: differs from "
        "zero_optimization.offload_optimizer.pin_memory (true); the estimate pins both or neither: set both the same"),
    "initialize: a parameter the offloaded CPU optimizer does not take": (
        {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "foreach": True}},
         "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}},
        "zero: error: optimizer.params.foreach: is not a parameter of zero_offload.optim._adam.CPUAdam, which steps "
        "the offloaded optimizer state"),
    "config: step_in_backward at the stage --stages sets (0)": (
        {"gradient_clipping": 0, "zero_optimization": {"step_in_backward": True}},
        "zero: error: zero_optimization.step_in_backward: needs stage 3 (got stage 0)"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_refused_setting_fails_in_one_line_before_anything_is_traced(tmp_path: Path, name: str) -> None:
    config, message = REFUSED[name]
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    started = time.monotonic()
    # stage 0 ignores the offload blocks and is accepted: it would be traced first without the check
    done = run_zero("profile", "--model", "pythia-tiny", "--dry-run", "--stages", "0,3", "--ds-config", str(path))
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("zero: error:")]
    assert len(errors) == 1 and errors[0].startswith(message), done.stderr
    assert done.stderr.strip().splitlines()[-1] == errors[0]
    assert PROGRESS not in done.stderr and "rank 0 of" not in done.stderr, "refused before any model was built"
    assert elapsed < 60, elapsed


@pytest.fixture(scope="module")
def issue_4305() -> dict[str, Any]:
    done = run_zero("profile", "--dry-run", "--model", "pythia-tiny", "--lora-rank", "8", "--nproc", "2", "--stages",
                    "2,3", "--memory-efficient-linear", "false", "--micro-batch", "1", "--seq-len", "64", "--steps",
                    "1", "--ds-config", str(ISSUE_4305), "--json", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_the_issue_4305_config_runs_at_stages_2_and_3(issue_4305: dict[str, Any]) -> None:
    stage2, stage3 = issue_4305["settings"]
    assert (stage2["label"], stage3["label"]) == ("stage 2", "stage 3, memory_efficient_linear false")
    for setting in (stage2, stage3):
        assert setting["phases"]["step"]["measured_total"] > 0 and setting["phases"]["step"]["estimated_total"] > 0
    assert stage3["phases"]["init"]["measured_total"] < stage2["phases"]["init"]["measured_total"], \
        "stage 3 partitions the fp16 weights"


def test_the_issue_4305_report_says_how_it_read_the_config(issue_4305: dict[str, Any]) -> None:
    notes = issue_4305["notes"]
    assert "the ds_config has no optimizer block (its training script passes one to initialize): profiled with " \
           "AdamW (lr 1e-4)" in notes
    block, = [note for note in notes if "activation_checkpointing" in note]
    assert "--gradient-checkpointing" in block and "changes no figure here" in block
    assert "--checkpointing" not in block.replace("--gradient-checkpointing", ""), "only flags zero profile has"


def test_step_in_backward_takes_its_stage_from_stages(tmp_path: Path) -> None:
    """A config without a stage, with zero_optimization.step_in_backward: --stages 3 gives it stage 3."""
    config = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "gradient_clipping": 0,
              "zero_optimization": {"step_in_backward": True}}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    done = run_zero("profile", "--dry-run", "--model", "pythia-tiny", "--nproc", "2", "--stages", "3", "--steps", "1",
                    "--seq-len", "64", "--ds-config", str(path), "--json", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (setting,) = json.loads(done.stdout)["settings"]
    assert setting["placement"]["model_state_bytes_per_param"] == 12
    assert "grad.partition" not in setting["phases"]["step"]["measured"]
