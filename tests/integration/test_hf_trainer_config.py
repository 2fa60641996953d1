"""ZeroTrainer's zero_config and TrainingArguments, in one process (no ranks, no engine built).

- "auto" is filled as transformers fills it for DeepSpeed: batch keys, clipping, AdamW's lr/betas/eps/weight_decay,
  the scheduler's warmup_min_lr/warmup_max_lr/warmup_num_steps/total_num_steps, fp16/bf16, and the hidden-size
  keys (h*h, int(0.9*h*h), 10*h; the stage-3 ones only at stage 3) from hidden_size, hidden_sizes or text_config.
- The keys the Trainer's loop owns count as "auto" when left out; keys under a block the config lacks stay out.
- Values that disagree with TrainingArguments are one one-line error naming each value and argument, raised when
  ZeroTrainer is built.
- Refused Trainer features are one error each, naming the setting and the way out.
- Without transformers or accelerate the package raises one ImportError naming `pip install transformers accelerate`.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("accelerate")
pytest.importorskip("transformers")

from zero_core.integrations.transformers import ZeroTrainer, ZeroTrainerError, resolve_config  # noqa: E402

ARGUMENTS: dict[str, Any] = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 3, "learning_rate": 3e-4,
                             "adam_beta1": 0.8, "adam_beta2": 0.95, "adam_epsilon": 1e-6, "weight_decay": 0.1,
                             "max_grad_norm": 0.5, "warmup_steps": 10}
AUTO = "auto"
FULL_OF_AUTO: dict[str, Any] = {
    "train_batch_size": AUTO, "train_micro_batch_size_per_gpu": AUTO, "gradient_accumulation_steps": AUTO,
    "gradient_clipping": AUTO, "bf16": {"enabled": AUTO}, "fp16": {"enabled": AUTO, "loss_scale": 0},
    "optimizer": {"type": "AdamW", "params": {"lr": AUTO, "betas": AUTO, "eps": AUTO, "weight_decay": AUTO}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": AUTO, "warmup_max_lr": AUTO,
                                                      "warmup_num_steps": AUTO, "total_num_steps": AUTO}},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": AUTO, "stage3_prefetch_bucket_size": AUTO,
                          "param_persistence_threshold": AUTO},
}


def _args(tmp_path: Path, **changes: Any) -> Any:
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], **{**ARGUMENTS, **changes})


def _model() -> Any:
    from hf_models import small_gpt_neox

    return small_gpt_neox(0)


def test_auto_values_are_filled_as_transformers_fills_them(tmp_path: Path) -> None:
    config = resolve_config(FULL_OF_AUTO, _args(tmp_path, bf16=True), SimpleNamespace(hidden_size=64), max_steps=100)
    assert config == {
        "train_batch_size": 12, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 3,
        "gradient_clipping": 0.5, "bf16": {"enabled": True}, "fp16": {"enabled": False, "loss_scale": 0},
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.1}},
        "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4,
                                                          "warmup_num_steps": 10, "total_num_steps": 100}},
        "zero_optimization": {"stage": 3, "reduce_bucket_size": 4096, "stage3_prefetch_bucket_size": 3686,
                              "param_persistence_threshold": 640},
    }
    assert FULL_OF_AUTO["train_batch_size"] == AUTO  # the caller's dict is left as it was


@pytest.mark.parametrize(("model_config", "hidden"), [
    (SimpleNamespace(hidden_sizes=[8, 32, 16]), 32),
    (SimpleNamespace(text_config=SimpleNamespace(hidden_size=16)), 16),
    (SimpleNamespace(text_config=SimpleNamespace(hidden_sizes=[4, 8])), 8),
])
def test_hidden_size_is_read_where_transformers_reads_it(tmp_path: Path, model_config: Any, hidden: int) -> None:
    config = resolve_config({"zero_optimization": {"stage": 2, "reduce_bucket_size": AUTO,
                                                   "stage3_param_persistence_threshold": AUTO}},
                            _args(tmp_path), model_config)
    # Below stage 3 the stage-3 key keeps "auto", which zero reads as its default.
    assert config["zero_optimization"] == {"stage": 2, "reduce_bucket_size": hidden * hidden,
                                           "stage3_param_persistence_threshold": AUTO}


def test_a_model_without_a_hidden_size_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(ZeroTrainerError, match=r"^zero_optimization.reduce_bucket_size: \"auto\" is sized from the "
                                                r"model's hidden size.*set these keys to numbers of elements$"):
        resolve_config({"zero_optimization": {"reduce_bucket_size": AUTO}}, _args(tmp_path), SimpleNamespace())


def test_keys_the_loop_owns_follow_the_arguments_when_left_out(tmp_path: Path) -> None:
    config = resolve_config({"zero_optimization": {"stage": 2}, "optimizer": {"type": "SGD", "params": {}}},
                            _args(tmp_path, bf16=True))
    assert config == {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 3, "train_batch_size": 12,
                      "gradient_clipping": 0.5, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2},
                      "optimizer": {"type": "SGD", "params": {}}}  # only "auto" fills an optimizer's params


def test_disagreements_are_one_error_naming_both_sides(tmp_path: Path) -> None:
    config = {"train_micro_batch_size_per_gpu": 8, "gradient_clipping": 1.0, "fp16": {"enabled": True},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.8, 0.95]}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5, "warmup_min_lr": 0.5}}}
    with pytest.raises(ZeroTrainerError) as caught:
        resolve_config(config, _args(tmp_path), max_steps=100)
    assert str(caught.value) == (
        "zero_config disagrees with TrainingArguments: train_micro_batch_size_per_gpu=8 vs per_device_train_batch_size=4; "
        "gradient_clipping=1.0 vs max_grad_norm=0.5; "
        "optimizer.params.lr=0.001 vs learning_rate=0.0003; fp16.enabled=True vs fp16=False; "
        "scheduler.params.warmup_num_steps=5 vs warmup_steps=10; "
        'set these config values to "auto" (ZeroTrainer fills them in) or change the TrainingArguments to match')


def test_zero_trainer_checks_its_config_when_built(tmp_path: Path) -> None:
    with pytest.raises(ZeroTrainerError, match="gradient_accumulation_steps=2 vs gradient_accumulation_steps=3"):
        ZeroTrainer(model=_model(), args=_args(tmp_path), zero_config={"gradient_accumulation_steps": 2})


@pytest.mark.parametrize(("setting", "value", "message"), [
    ("deepspeed", "ds_config.json", r"TrainingArguments\(deepspeed=...\)"),
    ("fsdp", True, "fsdp shards the model a second time"),
    ("auto_find_batch_size", True, "auto_find_batch_size rebuilds"),
    ("_n_gpu", 2, "n_gpu=2 would wrap the model in DataParallel"),
    ("torch_compile", True, "torch_compile: the engine runs its hooks"),
    ("bf16_full_eval", True, "fp16_full_eval/bf16_full_eval cast the model"),
    ("save_on_each_node", True, "save_on_each_node: zero's checkpoints"),
])
def test_refused_features_are_one_error_each(tmp_path: Path, setting: str, value: Any, message: str) -> None:
    args = _args(tmp_path)
    setattr(args, setting, value)  # after construction: TrainingArguments would build DeepSpeed's or FSDP's plugin
    with pytest.raises(ZeroTrainerError, match=f"^ZeroTrainer: {message}"):
        ZeroTrainer(model=_model(), args=args, zero_config={})


@pytest.mark.parametrize(("arguments", "message"), [
    ({"optim": "lomo"}, "optim=lomo updates the weights inside backward"),
    ({"lr_scheduler_type": "reduce_lr_on_plateau", "eval_strategy": "steps"},
     "lr_scheduler_type=reduce_lr_on_plateau steps on evaluation metrics"),
])
def test_refused_choices_are_named_as_written(tmp_path: Path, arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ZeroTrainerError, match=f"^ZeroTrainer: {message}"):
        ZeroTrainer(model=_model(), args=_args(tmp_path, **arguments), zero_config={})


def test_the_optimizer_is_named_once(tmp_path: Path) -> None:
    import torch

    model = _model()
    with pytest.raises(ZeroTrainerError, match=r"optimizers=\(optimizer, ...\) and an optimizer block"):
        ZeroTrainer(model=model, args=_args(tmp_path), optimizers=(torch.optim.SGD(model.parameters(), lr=0.1), None),
                    zero_config={"optimizer": {"type": "AdamW", "params": {"lr": AUTO}}})


def test_resuming_needs_an_engine_checkpoint(tmp_path: Path) -> None:
    trainer = ZeroTrainer(model=_model(), args=_args(tmp_path), zero_config={})
    with pytest.raises(ZeroTrainerError, match="holds no engine checkpoint .* to resume from"):
        trainer.train(resume_from_checkpoint=str(tmp_path))


def test_missing_libraries_are_one_import_error_naming_the_fix() -> None:
    code = "import sys; sys.modules['accelerate'] = None; import zero_core.integrations.transformers"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "ImportError: zero_core.integrations.transformers needs accelerate (not installed here): "
        "pip install transformers accelerate")
