"""transformers' own examples/pytorch/language-modeling/run_clm.py, unchanged, with `--deepspeed ds.json` under
`zero launch` (docs/integrations.md, "transformers' run_clm.py"; issue 34, item 3).

The program is not in the transformers wheel or sdist: ZERO_RUN_CLM names a copy of it (RUN_CLM_URL); the
tests skip where it is unset. Everything it loads is local (HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1, HF_HOME in
the test's folder; bench/programs/local_assets.py): a word-level tokenizer (`--tokenizer_name`), a tiny GPT-NeoX saved
with random weights (`--model_name_or_path`) or only its config (`--config_name --model_type gpt_neox`, trained
from scratch), and text files (`--train_file`, `--validation_file`). 2 CPU ranks on gloo, `--use_cpu`, a stage-3
config full of "auto" (the scheduler's too), 4 steps of 2 micro-batches of 2 blocks of 16 tokens, a checkpoint
every 2 steps. Losses are read from the run's trainer_state.json (log_history, `--logging_steps 1`).
- Under zero launch: the model is built under zero's Init (transformers' ZeRO-3 path), trained, saved whole
  (stage3_gather_16bit_weights_on_model_save), and resumed from checkpoint-2 (`--resume_from_checkpoint`) its
  steps 3-4 equal the uninterrupted run's exactly.
- Against DeepSpeed 0.19.8 under torchrun (DS_ACCELERATOR=cpu; skipped where DeepSpeed is absent): per-step losses
  within FP32_TOLERANCE in fp32 (measured 0.0, both model routes) and BF16_TOLERANCE in bf16 (measured 1.0e-4).
Harness patches, none of them to the program: on DeepSpeed only, DeepSpeed's comm starts the process group before
the program runs (`on_deepspeed(comm_first=True)`): with `--use_cpu` accelerate starts it, and DeepSpeed's zero.Init
then reads world size 1 and refuses the Trainer's train_batch_size. run_clm's check_min_version("4.57.0.dev0") and
require_version("datasets>=2.14.0") pass on transformers 5.24.0 and datasets 5.2.0 as they are.
Not run: `--do_eval`, whose metric (`evaluate.load("accuracy")`) comes from the Hub.
Each zero launch run takes about 12 s, each DeepSpeed run about 35-60 s (its fused Adam compiles once first).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from programs._launch_runs import (AUTO_STAGE3, BF16_TOLERANCE, FP32_TOLERANCE, assert_close, needs_deepspeed,
                                   on_deepspeed, zero_launch)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "programs"))
from local_assets import save_gpt_neox, save_tokenizer, write_text  # noqa: E402

pytest.importorskip("accelerate")
pytest.importorskip("datasets")
pytest.importorskip("evaluate")
pytest.importorskip("transformers")
pytestmark = pytest.mark.timeout(240)

RUN_CLM_URL = "https://github.com/huggingface/transformers/blob/main/examples/pytorch/language-modeling/run_clm.py"
RUN_CLM = os.environ.get("ZERO_RUN_CLM", "")
needs_run_clm = pytest.mark.skipif(not (RUN_CLM and Path(RUN_CLM).is_file()),
                                   reason=f"set ZERO_RUN_CLM to a copy of transformers' run_clm.py ({RUN_CLM_URL}); "
                                          f"it is not in the transformers wheel"
                                          + (f" (ZERO_RUN_CLM={RUN_CLM} is not a file)" if RUN_CLM else ""))
# AUTO_STAGE3 with DeepSpeed's WarmupLR, whose steps the Trainer fills in only after the model is built
STAGE3 = {**AUTO_STAGE3, "scheduler": {"type": "WarmupLR", "params": {
    "warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"}}}
MODEL_ROUTES = {"pretrained": ("--model_name_or_path",), "from-config": ("--model_type", "gpt_neox", "--config_name")}


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("run_clm_assets")
    save_tokenizer(folder / "tokenizer")
    save_gpt_neox(folder / "model", seed=0)
    write_text(folder / "train.txt", lines=64, seed=1)
    write_text(folder / "valid.txt", lines=8, seed=2)
    (folder / "ds.json").write_text(json.dumps(STAGE3))
    return folder


def _args(assets: Path, output: Path, route: str = "pretrained", *extra: str) -> tuple[str, ...]:
    return (*MODEL_ROUTES[route], str(assets / "model"), "--tokenizer_name", str(assets / "tokenizer"),
            "--train_file", str(assets / "train.txt"), "--validation_file", str(assets / "valid.txt"),
            "--deepspeed", str(assets / "ds.json"), "--do_train", "--block_size", "16",
            "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2", "--learning_rate", "1e-3",
            "--warmup_steps", "1", "--max_steps", "4", "--logging_steps", "1", "--save_steps", "2",
            "--report_to", "none", "--seed", "0", "--use_cpu", "--output_dir", str(output), *extra)


def _offline(tmp_path: Path) -> dict[str, str]:
    return {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}


def _losses(output: Path) -> dict[int, float]:
    """step -> the loss the Trainer logged for it, from output/trainer_state.json."""
    history = json.loads((output / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry["loss"] for entry in history if "loss" in entry}


@needs_run_clm
def test_run_clm_at_stage3_saves_and_resumes_exactly_under_zero_launch(assets: Path, tmp_path: Path) -> None:
    program = Path(RUN_CLM)
    zero_launch(program, *_args(assets, tmp_path / "whole"), **_offline(tmp_path))
    whole = _losses(tmp_path / "whole")
    assert sorted(whole) == [1, 2, 3, 4]
    assert (tmp_path / "whole" / "model.safetensors").is_file()  # save_model gathered the stage-3 weights
    checkpoint = tmp_path / "whole" / "checkpoint-2"
    assert sorted(_losses(checkpoint)) == [1, 2]
    zero_launch(program, *_args(assets, tmp_path / "resumed", "pretrained", "--resume_from_checkpoint",
                                str(checkpoint)), **_offline(tmp_path))
    assert _losses(tmp_path / "resumed") == whole  # steps 1-2 from the checkpoint's state, 3-4 trained again


@needs_run_clm
@needs_deepspeed
@pytest.mark.parametrize(("route", "precision"), [("pretrained", "fp32"), ("pretrained", "bf16"),
                                                  ("from-config", "fp32")])
def test_run_clm_matches_deepspeed(assets: Path, tmp_path: Path, route: str, precision: str) -> None:
    program, bf16 = Path(RUN_CLM), ("--bf16",) if precision == "bf16" else ()
    zero_launch(program, *_args(assets, tmp_path / "zero", route, *bf16), **_offline(tmp_path))
    on_deepspeed(program, *_args(assets, tmp_path / "deepspeed", route, *bf16), comm_first=True,
                 **_offline(tmp_path))
    zero, deepspeed = _losses(tmp_path / "zero"), _losses(tmp_path / "deepspeed")
    assert sorted(zero) == sorted(deepspeed) == [1, 2, 3, 4]
    assert_close(list(zero.values()), list(deepspeed.values()), BF16_TOLERANCE if bf16 else FP32_TOLERANCE)
