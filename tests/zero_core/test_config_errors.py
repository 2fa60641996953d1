"""Bad configs: each is one ConfigError, one line, naming the JSON path, the problem and the fix."""
from __future__ import annotations

import pickle
import re

import pytest
from zero_core.config import ConfigError, load_config
from zero_plugins import ZeroError

BAD = [
    ({"zero_optimization": {"stage": 4}}, "zero_optimization.stage", "must be 0, 1, 2 or 3 (got 4)"),
    ({"zero_optimization": {"stag": 2}}, "zero_optimization.stag", 'did you mean "stage"?'),
    ({"train_batch_sise": 8}, "train_batch_sise", 'did you mean "train_batch_size"?'),
    (
        {"zero_optimization": {"stage3_max_live_params": 1}},
        "zero_optimization.stage3_max_live_params",
        'did you mean "stage3_max_live_parameters"?',
    ),
    ({"optimizer": {"type": "Adam", "param": {}}}, "optimizer.param", 'did you mean "params"?'),
    ({"wandb2": {}}, "wandb2", 'did you mean "wandb"?'),  # close to an ignored key
    ({"xyz": 1}, "xyz", "unknown key; remove it"),
    ({"stage": 2}, "stage", 'move it into "zero_optimization"'),
    ({"offload_param": {"device": "cpu"}}, "offload_param", 'move it into "zero_optimization"'),
    ({"fp16": {"enabled": "yes"}}, "fp16.enabled", 'must be true or false (got "yes")'),
    ({"fp16": {"enabled": True}, "bf16": {"enabled": True}}, "bf16.enabled", "enable one of them"),
    (
        {"zero_optimization": {"offload_optimizer": {"device": "GPU 0"}}},
        "zero_optimization.offload_optimizer.device",
        'must be "none", "cpu", "nvme" or another registered offload device\'s name (got "GPU 0")',
    ),
    (
        {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}},
        "zero_optimization.offload_param.nvme_path",
        'is required when device is "nvme"',
    ),
    (
        {"zero_optimization": {"offload_param": {"device": "cpu", "nvme_path": 5}}},
        "zero_optimization.offload_param.nvme_path",
        "must be a path (a string) (got 5)",
    ),
    ({"zero_optimization": {"reduce_bucket_size": 0}}, "zero_optimization.reduce_bucket_size", "must be > 0 (got 0)"),
    (
        {"zero_optimization": {"allgather_bucket_size": 1.5}},
        "zero_optimization.allgather_bucket_size",
        "must be a whole number (got 1.5)",
    ),
    ({"train_micro_batch_size_per_gpu": True}, "train_micro_batch_size_per_gpu", "must be an integer (got true)"),
    ({"steps_per_print": "10"}, "steps_per_print", 'must be an integer (got "10")'),
    ({"train_batch_size": 0}, "train_batch_size", "must be > 0 (got 0)"),
    ({"gradient_clipping": -1}, "gradient_clipping", "must be >= 0 (got -1)"),
    ({"gradient_clipping": float("nan")}, "gradient_clipping", "must be a finite number"),
    ({"fp16": {"loss_scale": -1}}, "fp16.loss_scale", "must be >= 0 (got -1)"),
    ({"fp16": {"hysteresis": 0}}, "fp16.hysteresis", "must be >= 1 (got 0)"),
    (
        {"fp16": {"enabled": True, "loss_scale_window": 0}},
        "fp16.loss_scale_window",
        "must be > 0 with dynamic loss scaling",
    ),
    ({"fp16": {"enabled": True, "min_loss_scale": 0}}, "fp16.min_loss_scale", "must be > 0 with dynamic loss scaling"),
    ({"optimizer": {"params": {"lr": 1e-3}}}, "optimizer.type", "is required"),
    ({"optimizer": {"type": ""}}, "optimizer.type", 'must not be empty (got "")'),
    (
        {"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}},
        "optimizer.params.lr",
        'only the Hugging Face Trainer fills in "auto"',
    ),
    ({"scheduler": {"type": "WarmupLR", "params": []}}, "scheduler.params", "must be an object (got [])"),
    ({"zero_optimization": True}, "zero_optimization", "must be an object (got true)"),
    (
        {"zero_optimization": {"max_live_parameters": 1, "stage3_max_live_parameters": 2}},
        "zero_optimization.stage3_max_live_parameters",
        'same setting as "max_live_parameters"; keep one of them',
    ),
    ({"bf16": {"enabled": True}, "bfloat16": {"enabled": True}}, "bfloat16", 'same setting as "bf16"'),
    (
        {"zero_optimization": {"cpu_offload": True, "offload_optimizer": {"device": "cpu"}}},
        "zero_optimization",
        "keep only offload_optimizer",
    ),
    ({"aio": {"queue_depth": 0}}, "aio.queue_depth", "must be > 0 (got 0)"),
    (
        {"aio": {"thread_count": 2, "intra_op_parallelism": 2}},
        "aio.intra_op_parallelism",
        'same setting as "thread_count"',
    ),
    ({"amp": {"enabled": True}}, "amp", "DeepSpeed 0.19 rejects this key too"),
    ({"elasticity": {"enabled": True}}, "elasticity", "set the batch sizes directly"),
    ({"zero_optimization": {"mics_shard_size": 8}}, "zero_optimization.mics_shard_size", "remove it"),
    ({1: 2}, "1", "keys must be strings"),
]


@pytest.mark.parametrize("raw, path, problem", BAD, ids=[f"{i}-{case[1]}" for i, case in enumerate(BAD)])
def test_bad_config_is_one_line_error_naming_the_path(raw, path, problem):
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    message = str(info.value)
    assert info.value.path == path
    assert message.startswith(f"{path}: ")
    assert problem in message
    assert "\n" not in message
    assert isinstance(info.value, ZeroError)  # the CLI prints ZeroErrors as one line


def test_config_error_survives_pickling():
    error = pickle.loads(pickle.dumps(ConfigError("zero_optimization.stage", "must be 0, 1, 2 or 3 (got 4)")))
    assert error.path == "zero_optimization.stage"
    assert str(error) == "zero_optimization.stage: must be 0, 1, 2 or 3 (got 4)"


def test_stage_error_reads_as_documented():
    with pytest.raises(ConfigError) as info:
        load_config({"zero_optimization": {"stage": 4}})
    assert str(info.value) == "zero_optimization.stage: must be 0, 1, 2 or 3 (got 4)"


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"train_batch_size": 8,}', "not valid JSON (Expecting property name enclosed in double quotes at line 1"),
        ('{"zero_optimization": {"stage": 1, "stage": 2}}', 'key "stage" appears twice in one object'),
        ("[1, 2]", "must hold a JSON object (got list)"),
    ],
)
def test_bad_config_file(tmp_path, text, problem):
    path = tmp_path / "ds_config.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"config file {path}: ")
    assert problem in message
    assert "\n" not in message


def test_missing_config_file(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(ConfigError, match=f"^config file {re.escape(str(path))}: not found$"):
        load_config(str(path))
