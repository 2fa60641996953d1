"""ZeroTrainer (zero_core.integrations.transformers) against the stock Hugging Face Trainer, on 2 gloo ranks.

One launch runs, on every rank:
- the stock Trainer (DDP), 6 optimizer steps of a small GPT-NeoX, fp32, 2 micro-batches of 2 per step;
- ZeroTrainer at stage 3 with the optimizer state offloaded to CPU and a zero_config full of "auto" (batch keys,
  clipping, AdamW's lr/betas/eps/weight_decay, precision, the hidden-size keys), same seeds and data. An epoch
  is 7 micro-batches, so every 4th step is the Trainer's short end-of-epoch step (one micro-batch), which the
  engine must take with it; `evaluate()` runs before train() (an engine that only evaluates) and after it;
- the stock Trainer and ZeroTrainer at stage 2 with a zero_config holding only the stage: the Trainer's AdamW
  with weight decay (its two param groups) and its warmup schedule, through zero_core.initialize;
- a second ZeroTrainer, built with other weights, resumed from checkpoint-3 of the first, without the
  stage3_gather_16bit_weights_on_model_save key, so its save_model() writes an engine checkpoint and warns;
- `model.generate(synced_gpus=True)` through the stage-3 engine, with the ranks asking for different lengths;
- the saved model loaded inside `zero_init(...)` (partitioned as it loads), then `predict()` with no train() first.
Also the accelerate pattern of docs/integrations.md (accelerate's data loader, zero's engine), and
examples/hf_trainer.py under torchrun on 2 ranks.

Checked: losses, grad norms and learning rates per step equal the stock Trainer's (relative 1e-3; fp32 gives
about 1e-6), evaluation losses too, the engine took exactly the Trainer's 6 steps, the resumed run's steps
4-6 equal the uninterrupted run's, the model save_model() wrote loads with from_pretrained and gives the
engine's logits, and each rank's generated tokens equal those of that loaded model on one process.
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from multirank import run_ranks

pytest.importorskip("accelerate")
pytest.importorskip("transformers")

MICRO, ACCUMULATION, STEPS, SAVE_STEPS = 2, 2, 6, 3
SAMPLES, EVAL_SAMPLES, SEQ, VOCAB = 28, 8, 16, 96  # 28 samples on 2 ranks: 7 micro-batches per rank per epoch
AUTO_CONFIG: dict[str, Any] = {
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto", "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "reduce_bucket_size": "auto",
                          "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"},
}
GATHERING_CONFIG = {**AUTO_CONFIG, "zero_optimization": {**AUTO_CONFIG["zero_optimization"],
                                                          "stage3_gather_16bit_weights_on_model_save": True}}


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, count: int, seed: int) -> None:
        self.ids = torch.randint(0, VOCAB, (count, SEQ), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def _args(output_dir: Path, **kwargs: Any) -> Any:
    from transformers import TrainingArguments

    return TrainingArguments(**{"output_dir": str(output_dir), "per_device_train_batch_size": MICRO,
                                "per_device_eval_batch_size": MICRO, "gradient_accumulation_steps": ACCUMULATION,
                                "learning_rate": 1e-3, "max_steps": STEPS, "logging_steps": 1, "report_to": [],
                                "use_cpu": True, "disable_tqdm": True, **kwargs})


def _logged(trainer: Any) -> list[tuple[int, float, float, float]]:
    return [(h["step"], h["loss"], h["grad_norm"], h["learning_rate"]) for h in trainer.state.log_history if "loss" in h]


def _stock(tmp: Path) -> dict[str, Any]:
    from hf_models import small_gpt_neox
    from transformers import Trainer

    # Evaluated by a Trainer of its own: the stock Trainer evaluating before train() never wraps the model in DDP
    # afterwards (transformers 5.24), and its ranks then train apart.
    before = Trainer(model=small_gpt_neox(0), args=_args(tmp / "stock-eval"), eval_dataset=Tokens(EVAL_SAMPLES, 1))
    eval_before = before.evaluate()["eval_loss"]
    trainer = Trainer(model=small_gpt_neox(0), args=_args(tmp / "stock", save_strategy="no"),
                      train_dataset=Tokens(SAMPLES, 0), eval_dataset=Tokens(EVAL_SAMPLES, 1))
    trainer.train()
    return {"logged": _logged(trainer), "eval": (eval_before, trainer.evaluate()["eval_loss"])}


def _zero(tmp: Path, rank: int) -> dict[str, Any]:
    from hf_models import small_gpt_neox
    from zero_core.integrations.transformers import ZeroTrainer

    trainer = ZeroTrainer(model=small_gpt_neox(0), args=_args(tmp / "zero", save_steps=SAVE_STEPS),
                          train_dataset=Tokens(SAMPLES, 0), eval_dataset=Tokens(EVAL_SAMPLES, 1),
                          zero_config=GATHERING_CONFIG)
    eval_before = trainer.evaluate()["eval_loss"]
    trainer.train()
    engine = trainer.engine
    result = {"logged": _logged(trainer), "eval": (eval_before, trainer.evaluate()["eval_loss"]),
              "steps": engine.global_steps, "keys": set(trainer.state.log_history[0]),
              "checkpoint": sorted(os.listdir(tmp / "zero" / f"checkpoint-{SAVE_STEPS}"))}
    trainer.save_model(str(tmp / "final"))
    probe = Tokens(2, 2).ids
    engine.eval()
    with torch.no_grad():
        result["logits"] = engine(input_ids=probe).logits
        # Ranks ask for different lengths: synced_gpus keeps the one that is done running forwards with the other.
        result["generated"] = engine.generate(input_ids=probe[rank:rank + 1, :5], max_new_tokens=6 - 3 * rank,
                                              do_sample=False, synced_gpus=True, pad_token_id=0)
    return result


def _trainers_own_optimizer(tmp: Path) -> dict[str, Any]:
    """A zero_config with only a stage: the Trainer's AdamW (weight decay off for biases and norms) and schedule."""
    from hf_models import small_gpt_neox
    from transformers import Trainer
    from zero_core.integrations.transformers import ZeroTrainer

    logged = {}
    for name, make in (("stock", Trainer), ("zero", ZeroTrainer)):
        extra = {"zero_config": {"zero_optimization": {"stage": 2}}} if make is ZeroTrainer else {}
        trainer = make(model=small_gpt_neox(0), args=_args(tmp / f"own-{name}", save_strategy="no", weight_decay=0.1,
                                                           max_steps=3, warmup_steps=1),
                       train_dataset=Tokens(SAMPLES, 0), **extra)
        trainer.train()
        logged[name] = _logged(trainer)
    return logged


def _resumed(tmp: Path) -> dict[str, Any]:
    from hf_models import small_gpt_neox
    from zero_core.integrations.transformers import ZeroTrainer

    trainer = ZeroTrainer(model=small_gpt_neox(7), args=_args(tmp / "resumed", save_strategy="no"),
                          train_dataset=Tokens(SAMPLES, 0), zero_config=AUTO_CONFIG)
    trainer.train(resume_from_checkpoint=str(tmp / "zero" / f"checkpoint-{SAVE_STEPS}"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.save_model(str(tmp / "not-gathered"))
    return {"logged": _logged(trainer), "warnings": [str(w.message) for w in caught],
            "not_gathered": sorted(os.listdir(tmp / "not-gathered"))}


def _predicted_from_partitions(tmp: Path) -> dict[str, Any]:
    from transformers import AutoConfig, AutoModelForCausalLM
    from zero_core.integrations.transformers import ZeroTrainer, zero_init

    args = _args(tmp / "partitioned")
    with zero_init(GATHERING_CONFIG, args, AutoConfig.from_pretrained(tmp / "final")):
        model = AutoModelForCausalLM.from_pretrained(tmp / "final")
    partitioned = all(param.numel() == 0 for param in model.gpt_neox.layers.parameters() if param.dim() == 2)
    trainer = ZeroTrainer(model=model, args=args, zero_config=GATHERING_CONFIG)
    return {"partitioned": partitioned, "loss": trainer.predict(Tokens(EVAL_SAMPLES, 1)).metrics["test_loss"]}


def _accelerate_loop() -> dict[str, Any]:
    """docs/integrations.md's accelerate pattern: accelerate shards the data, the engine trains the model, which
    never goes through accelerator.prepare()."""
    import zero_core
    from accelerate import Accelerator
    from hf_models import small_gpt_neox

    accelerator = Accelerator()
    loader = accelerator.prepare(torch.utils.data.DataLoader(Tokens(4 * MICRO, 0), batch_size=MICRO))
    config = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": ACCUMULATION,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 2}}
    engine, _, _, _ = zero_core.initialize(model=small_gpt_neox(0), config=config)
    first, losses = None, []
    for batch in loader:
        first = batch["input_ids"] if first is None else first
        loss = engine(**batch).loss
        engine.backward(loss)
        engine.step()
        losses.append(accelerator.gather(loss.detach()).mean().item())
    engine.destroy()
    return {"first": first, "losses": losses, "steps": engine.global_steps}


def _ranks(rank: int, world_size: int, tmp: Path) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    result = {"stock": _stock(tmp), "zero": _zero(tmp, rank), "resumed": _resumed(tmp),
              "predicted": _predicted_from_partitions(tmp), "accelerate": _accelerate_loop(),
              "own_optimizer": _trainers_own_optimizer(tmp)}
    loaded = AutoModelForCausalLM.from_pretrained(tmp / "final").eval()
    probe = Tokens(2, 2).ids
    with torch.no_grad():
        result["loaded_logits"] = loaded(input_ids=probe).logits
        result["loaded_generated"] = loaded.generate(input_ids=probe[rank:rank + 1, :5], max_new_tokens=6 - 3 * rank,
                                                     do_sample=False, pad_token_id=0)
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return run_ranks(_ranks, 2, tmp_path_factory.mktemp("hf-trainer"), timeout=300)


def _close(ours: list[tuple[int, float, float, float]], theirs: list[tuple[int, float, float, float]]) -> None:
    assert [step for step, *_ in ours] == [step for step, *_ in theirs]
    for (step, *values), (_, *expected) in zip(ours, theirs):
        assert values == pytest.approx(expected, rel=1e-3), f"step {step}: (loss, grad_norm, lr)"


def test_training_matches_the_stock_trainer(runs: list[dict[str, Any]]) -> None:
    zero, stock = runs[0]["zero"], runs[0]["stock"]
    assert len(zero["logged"]) == STEPS and {"loss", "grad_norm", "learning_rate"} <= zero["keys"]
    _close(zero["logged"], stock["logged"])
    assert zero["steps"] == STEPS  # the engine stepped with the Trainer, short end-of-epoch step included


def test_the_trainers_own_optimizer_and_schedule(runs: list[dict[str, Any]]) -> None:
    logged = runs[0]["own_optimizer"]
    _close(logged["zero"], logged["stock"])


def test_evaluate_matches_the_stock_trainer(runs: list[dict[str, Any]]) -> None:
    assert runs[0]["zero"]["eval"] == pytest.approx(runs[0]["stock"]["eval"], rel=1e-3)


def test_resume_from_checkpoint_reproduces_the_last_steps(runs: list[dict[str, Any]]) -> None:
    zero, resumed = runs[0]["zero"], runs[0]["resumed"]
    assert {"global_step3", "latest", "model.safetensors", "trainer_state.json"} <= set(zero["checkpoint"])
    after = [entry for entry in resumed["logged"] if entry[0] > SAVE_STEPS]  # the history before came with the state
    _close(after, zero["logged"][SAVE_STEPS:])


def test_saved_model_loads_with_from_pretrained(runs: list[dict[str, Any]]) -> None:
    for rank in runs:
        torch.testing.assert_close(rank["loaded_logits"], runs[0]["zero"]["logits"], rtol=1e-5, atol=1e-5)


def test_predict_before_train_on_a_model_partitioned_while_loading(runs: list[dict[str, Any]]) -> None:
    predicted = runs[0]["predicted"]
    assert predicted["partitioned"]  # zero_init partitioned the weights as from_pretrained loaded them
    assert predicted["loss"] == pytest.approx(runs[0]["zero"]["eval"][1], rel=1e-5)


def test_generate_at_stage_3_with_ranks_in_step(runs: list[dict[str, Any]]) -> None:
    for rank, result in enumerate(runs):
        assert result["zero"]["generated"].shape[1] == 5 + 6 - 3 * rank
        assert torch.equal(result["zero"]["generated"], result["loaded_generated"])


def test_save_model_without_gathering_writes_a_checkpoint_and_warns(runs: list[dict[str, Any]]) -> None:
    resumed = runs[0]["resumed"]
    assert "latest" in resumed["not_gathered"] and "config.json" in resumed["not_gathered"]
    assert "model.safetensors" not in resumed["not_gathered"]
    assert any("stage3_gather_16bit_weights_on_model_save" in message for message in resumed["warnings"])
    assert runs[1]["resumed"]["warnings"] == []  # rank 0 says it once


def test_accelerate_shards_the_data_for_the_engine(runs: list[dict[str, Any]]) -> None:
    first, second = runs[0]["accelerate"], runs[1]["accelerate"]
    assert not torch.equal(first["first"], second["first"])  # each rank got its own shard
    assert first["steps"] == second["steps"] == 1 and first["losses"] == second["losses"]


def test_the_example_runs_on_two_ranks(tmp_path: Path) -> None:
    example = Path(__file__).parents[2] / "examples" / "hf_trainer.py"
    torchrun = Path(sys.executable).with_name("torchrun")
    run = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node", "2", str(example), "--steps", "20",
                          "--output-dir", str(tmp_path)], capture_output=True, text=True, timeout=300, check=False,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "generates the same: True" in run.stdout
    assert (tmp_path / "final" / "model.safetensors").is_file()
