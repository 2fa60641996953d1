"""DeepSpeed-Chat's step 1 (SFT) and step 2 (reward model) trainers, unchanged, under `zero launch`, against the same
trainers on DeepSpeed 0.19.8 (docs/integrations.md, "DeepSpeed-Chat"; issue 34, item 3).

DeepSpeed-Chat is not part of this repository: ZERO_DEEPSPEED_CHAT names the applications/DeepSpeed-Chat folder of
a clone of https://github.com/deepspeedai/DeepSpeedExamples, and these tests skip without it. Each run gets a copy
of its `dschat` package and the two trainers' main.py, unchanged, with a tiny OPT, its tokenizer and json data
made here (bench/programs/dschat_inputs.py); nothing is downloaded. 2 CPU ranks on gloo, OMP_NUM_THREADS=1, bf16
(the client's --dtype offers fp16 and bf16 only: there is no fp32 run), 4 optimizer steps of 2 samples per rank:
- step 1 at stage 2 with LoRA (--lora_dim 4 --only_optimize_lora), at stage 3 with LoRA and
  --gradient_checkpointing, and at stage 3 with --offload (the client's DeepSpeedCPUAdam, full fine-tuning);
- step 2 at stage 2 with --offload (full fine-tuning), and at stage 3 with LoRA.
Each run saves the model (--output_dir: the client fuses LoRA into the weights and gathers stage-3 parameters).

The losses come from the client's own output, one log per rank (torchrun's --redirects/--log-dir; the ranks'
prints interleave on a shared pipe): step 1's --print_loss lines of both ranks and its evaluation loss before and
after training; step 2 prints only an epoch's mean loss, so it runs 4 epochs of one step, with
--compute_fp32_loss. On DeepSpeed (plain torchrun, DS_ACCELERATOR=cpu, bench/programs/on_deepspeed.py giving
the --local_rank DeepSpeed's launcher gives) every loss agrees within BF16_TOLERANCE and so does every saved
weight. Step 2's evaluation scores are bf16 outputs of the reward head (one bf16 step is 2e-3 at 0.4, 4e-3 at
0.6), so they are checked finite, not compared; the weights they come from are compared.

Step 2 at stage 3 runs on zero only: DeepSpeed 0.19.8 stops in initialize (stage3.py's defragment asserts that
every trainable parameter has one dtype; the client builds its fp32 v_head after zero.Init made the model bf16).

The client's own incompatibilities with transformers 5, patched for both runs by the harness's sitecustomize
(bench/programs/dschat_site/sitecustomize.py), never in zero:
- dschat/utils/model/model_utils.py imports no_init_weights from transformers.modeling_utils (now in
  transformers.initialization).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "programs"))
import dschat_inputs  # noqa: E402
from dschat_inputs import Run  # noqa: E402
from programs._launch_runs import BF16_TOLERANCE, needs_deepspeed  # noqa: E402

pytest.importorskip("transformers")
pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(dschat_inputs.find_checkout() is None,
                                 reason=f"DeepSpeed-Chat is not here: {dschat_inputs.HOW_TO_GET}")]

ON_DEEPSPEED = Path(dschat_inputs.__file__).with_name("on_deepspeed.py")
RUNS = {run.name: run for run in (Run(1, 2, lora=True), Run(1, 3, lora=True, gradient_checkpointing=True),
                                  Run(1, 3, offload=True), Run(2, 2, offload=True),
                                  Run(2, 3, lora=True))}
# DeepSpeed 0.19.8 cannot run step 2 at stage 3 in bf16 (module docstring)
ON_BOTH = [case for case in RUNS if case != "step2-stage3-lora"]
STEPS, RANKS = dschat_inputs.STEPS, 2


@dataclass(frozen=True)
class Outcome:
    """One finished run: each rank's stdout and the folder the client saved its model to."""
    stdout: dict[int, str]
    saved: Path

    @property
    def all_ranks(self) -> str:
        return "".join(self.stdout[rank] for rank in sorted(self.stdout))


def _failure(stderr: str, logs: Path) -> str:
    """A failed launch's first traceback (from the ranks' error logs, else torchrun's output)."""
    errors = "".join(path.read_text() for path in sorted(logs.glob("*/attempt_*/*/stderr.log")))
    text = errors if "Traceback" in errors else stderr
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "Traceback" in line), max(0, len(lines) - 40))
    return "\n".join(lines[start:start + 60] + stderr.splitlines()[-20:])


def _launch(peer: str, run: Run, prepared: tuple[Path, Path], folder: Path) -> Outcome:
    copy, model = prepared
    work = folder / f"{peer}-{run.name}"
    work.mkdir()
    logs = work / "logs"
    program = [*dschat_inputs.program_arguments(run, copy, model, work), "--output_dir", str(work / "saved")]
    environment = {key: value for key, value in os.environ.items() if key != "DS_ACCELERATOR"}
    environment.update(dschat_inputs.program_environment(copy))
    # each rank's output to its own file: the ranks' prints interleave on a shared pipe
    torchrun = ["--nproc_per_node", str(RANKS), "--redirects", "3", "--log-dir", str(logs)]
    if peer == "zero":
        command = [sys.executable, "-m", "zero_cli", "launch", *torchrun, *program]
    else:
        environment["DS_ACCELERATOR"] = "cpu"
        command = [sys.executable, "-m", "torch.distributed.run", *torchrun, str(ON_DEEPSPEED), *program]
    # DeepSpeed compiles its CPU Adam ops the first time (about a minute on 2 cores, then cached)
    done = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=work,
                          timeout=150 if peer == "zero" else 250)
    assert done.returncode == 0, _failure(done.stderr, logs)
    stdout = {int(path.parent.name): path.read_text() for path in logs.glob("*/attempt_*/*/stdout.log")}
    assert sorted(stdout) == list(range(RANKS)), sorted(stdout)
    return Outcome(stdout, work / "saved")


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Outcome]:
    """Runs a case on a peer ("zero" or "deepspeed") once for the module: the agreement test reuses zero's runs."""
    folder = tmp_path_factory.mktemp("dschat")
    checkout = dschat_inputs.find_checkout()
    assert checkout is not None
    prepared = dschat_inputs.stage_checkout(checkout, folder), dschat_inputs.write_model(folder / "model")
    done: dict[tuple[str, str], Outcome] = {}

    def launch(peer: str, case: str) -> Outcome:
        if (peer, case) not in done:
            done[peer, case] = _launch(peer, RUNS[case], prepared, folder)
        return done[peer, case]

    return launch


def _losses(run: Run, outcome: Outcome) -> list[float]:
    """The losses a run printed, in a fixed order: for step 1 each (step, rank)'s and the evaluation loss before
    and after training; for step 2 each step's (rank 0's, one step an epoch)."""
    if run.step == 1:
        losses = dschat_inputs.step1_losses(outcome.all_ranks)
        assert sorted(losses) == [(step, rank) for step in range(STEPS) for rank in range(RANKS)], sorted(losses)
        evaluations = dschat_inputs.step1_eval_losses(outcome.stdout[0])
        assert len(evaluations) == 2, outcome.stdout[0]
        return [losses[key] for key in sorted(losses)] + evaluations
    step_losses = dschat_inputs.step2_losses(outcome.stdout[0])
    assert len(step_losses) == STEPS, outcome.stdout[0]
    return step_losses


def _saved_weights(outcome: Outcome) -> dict[str, torch.Tensor]:
    weights: dict[str, torch.Tensor] = torch.load(outcome.saved / "pytorch_model.bin", weights_only=True)
    return weights


@pytest.mark.parametrize("case", RUNS)
def test_dschat_trains_under_zero_launch(launched: Callable[[str, str], Outcome], case: str) -> None:
    run = RUNS[case]
    outcome = launched("zero", case)
    values = _losses(run, outcome)
    if run.step == 2:  # its evaluation before training and after each epoch
        scores = dschat_inputs.step2_scores(outcome.stdout[0])
        assert len(scores) == STEPS + 1, outcome.stdout[0]
        values += [score for pair in scores for score in pair]
    assert torch.isfinite(torch.tensor(values)).all(), values
    weights = _saved_weights(outcome)
    # the client saves the fused model, its LoRA factors left out, whole at stage 3 too
    assert not [name for name in weights if "lora" in name]
    config = json.loads((outcome.saved / "config.json").read_text())
    embedding = "model.decoder.embed_tokens.weight" if run.step == 1 else "rwtransformer.decoder.embed_tokens.weight"
    assert weights[embedding].shape == (config["vocab_size"], config["hidden_size"])


@needs_deepspeed
@pytest.mark.parametrize("case", ON_BOTH)
def test_dschat_matches_deepspeed(launched: Callable[[str, str], Outcome], case: str) -> None:
    run = RUNS[case]
    zero, deepspeed = launched("zero", case), launched("deepspeed", case)
    got, want = _losses(run, zero), _losses(run, deepspeed)
    worst = max(abs(a - b) for a, b in zip(got, want, strict=True))
    assert worst <= BF16_TOLERANCE, (worst, got, want)
    zero_weights, deepspeed_weights = _saved_weights(zero), _saved_weights(deepspeed)
    assert sorted(zero_weights) == sorted(deepspeed_weights)
    for name, tensor in zero_weights.items():
        torch.testing.assert_close(tensor, deepspeed_weights[name], atol=BF16_TOLERANCE, rtol=0)
