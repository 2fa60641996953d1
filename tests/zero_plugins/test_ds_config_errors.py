"""Bad configs: each is one ConfigError, one line, naming the JSON path, the problem and the fix."""
from __future__ import annotations

import pickle
import re
import typing

import pytest
from zero_plugins.ds_config import ConfigError, ZeroConfig, load_config
from zero_plugins.ds_config._base import ConfigModel
from zero_plugins.ds_config._params import OPTIMIZER_PARAMS, SCHEDULER_PARAMS
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
        # json words a trailing comma differently from Python 3.13 on: only our part of the message is checked
        ('{"train_batch_size": 8,}', "not valid JSON ("),
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


# "auto" outside the keys the Hugging Face Trainer fills in (issue #21): it read as the default, so a whole
# `"zero_optimization": "auto"` or `"stage": "auto"` silently ran stage 0.
AUTO_PROBLEM = 'must be a concrete value; "auto" is read only where the Hugging Face Trainer fills it in'
NOT_FILLED = [
    ({"zero_optimization": "auto"}, "zero_optimization"),
    ({"zero_optimization": {"stage": "auto"}}, "zero_optimization.stage"),
    ({"zero_optimization": {"stage": 3, "offload_param": "auto"}}, "zero_optimization.offload_param"),
    ({"zero_optimization": {"overlap_comm": "auto"}}, "zero_optimization.overlap_comm"),
    ({"fp16": "auto"}, "fp16"),
    ({"fp16": {"enabled": True, "loss_scale": "auto"}}, "fp16.loss_scale"),
    ({"optimizer": {"type": "auto"}}, "optimizer.type"),
    ({"optimizer": {"type": "AdamW", "params": "auto"}}, "optimizer.params"),
    ({"steps_per_print": "auto"}, "steps_per_print"),
    ({"non_finite_steps": {"max_consecutive": "auto"}}, "non_finite_steps.max_consecutive"),
]


@pytest.mark.parametrize("raw, path", NOT_FILLED, ids=[case[1] for case in NOT_FILLED])
def test_auto_where_the_trainer_fills_nothing_is_an_error_naming_the_key(raw, path):
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    assert info.value.path == path
    assert str(info.value) == f'{path}: {AUTO_PROBLEM} (docs/config.md, "auto")'


def test_auto_where_the_trainer_fills_it_still_means_deepspeeds_default():
    config = load_config({
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto", "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                              "stage3_param_persistence_threshold": "auto"},
    })
    zero = config.zero_optimization
    assert (config.train_batch_size, config.train_micro_batch_size_per_gpu, config.gradient_accumulation_steps) == (
        None, None, None)
    assert (config.gradient_clipping, config.compute_dtype, zero.stage) == (1.0, "fp32", 3)
    assert (zero.reduce_bucket_size, zero.stage3_prefetch_bucket_size, zero.stage3_param_persistence_threshold) == (
        500_000_000, 50_000_000, 100_000)


# Numbers no integer key can hold (issue #21): a whole float beyond int64 read "must be an integer of at most 4300
# digits", and an int beyond a float's range crashed the optimizer-param checks with OverflowError.
HUGE = [
    ({"train_micro_batch_size_per_gpu": 1e19}, "train_micro_batch_size_per_gpu",
     "must be <= 9223372036854775807 (got 1e+19)"),
    ({"train_micro_batch_size_per_gpu": 10**19}, "train_micro_batch_size_per_gpu",
     "must be <= 9223372036854775807 (got 10000000000000000000)"),
    ({"train_micro_batch_size_per_gpu": float("1e400")}, "train_micro_batch_size_per_gpu",
     "must be a finite number (got Infinity)"),
    ({"train_micro_batch_size_per_gpu": 10**5000}, "train_micro_batch_size_per_gpu",
     "must be <= 9223372036854775807 (got an integer of about 5001 digits)"),
    ({"train_micro_batch_size_per_gpu": -(10**5000)}, "train_micro_batch_size_per_gpu",
     "must be > 0 (got a negative integer of about 5001 digits)"),
    ({"zero_optimization": {"reduce_bucket_size": 1e308}}, "zero_optimization.reduce_bucket_size",
     "must be <= 9223372036854775807 (got 1e+308)"),
    ({"fp16": {"initial_scale_power": 1e19}}, "fp16.initial_scale_power", "must be <= 64 (got 10000000000000000000)"),
    ({"fp16": {"min_loss_scale": -(10**5000)}}, "fp16.min_loss_scale",
     "must be >= -9223372036854775808 (got a negative integer of about 5001 digits)"),
    ({"gradient_clipping": 10**400}, "gradient_clipping", "must be a finite number (got an integer of about 401 digits)"),
    ({"optimizer": {"type": "Adam", "params": {"lr": 10**400}}}, "optimizer.params.lr",
     "must be a finite number >= 0 (got an integer of about 401 digits)"),
    ({"optimizer": {"type": "Adam", "params": {"betas": [0.9, -(10**400)]}}}, "optimizer.params.betas[1]",
     "must be a number in [0, 1) (got a negative integer of about 401 digits)"),
]


@pytest.mark.parametrize("raw, path, problem", HUGE, ids=[f"{i}-{case[1]}" for i, case in enumerate(HUGE)])
def test_a_number_beyond_any_key_is_one_error_naming_the_key(raw, path, problem):
    with pytest.raises(ConfigError) as info:
        load_config(raw, world_size=2)
    assert str(info.value) == f"{path}: {problem}"


@pytest.mark.parametrize("text", ["1e19", "10000000000000000000", "1e400"])
def test_a_huge_number_in_a_file_names_the_key(tmp_path, text):
    path = tmp_path / "ds_config.json"
    path.write_text(f'{{"zero_optimization": {{"stage": 2, "reduce_bucket_size": {text}}}}}')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.path == "zero_optimization.reduce_bucket_size"
    assert "4300" not in str(info.value)


def _key_paths(model, prefix=()):
    """Every key the config models read, as a tuple of keys (blocks and the keys inside them)."""
    for key, field in model.key_names().items():
        yield (*prefix, key)
        block = next((c for c in (model.model_fields[field].annotation,
                                  *typing.get_args(model.model_fields[field].annotation))
                      if isinstance(c, type) and issubclass(c, ConfigModel)), None)
        if block is not None and key == field:
            yield from _key_paths(block, (*prefix, key))


def _at(path, value):
    raw = {"optimizer": {"type": "Adam"}, "scheduler": {"type": "WarmupLR"}} if path[0] in ("optimizer", "scheduler") else {}
    node = raw
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return raw


ALL_PATHS = [*_key_paths(ZeroConfig), *(("optimizer", "params", k) for k in OPTIMIZER_PARAMS),
             *(("scheduler", "params", k) for k in SCHEDULER_PARAMS)]


@pytest.mark.parametrize("value", [10**5000, -(10**5000), float("inf"), 1e19, 10**19],
                         ids=["10**5000", "-10**5000", "inf", "1e19", "10**19"])
def test_no_key_takes_a_number_beyond_int64_or_float_without_a_one_line_error(value):
    for path in ALL_PATHS:
        if len(path) == 2 and path[1] == "type" and path[0] in ("optimizer", "scheduler"):
            continue  # the type names the block's class; not a number
        try:
            load_config(_at(path, value))
        except ConfigError as error:
            assert error.path.startswith(".".join(path)), (path, str(error))
            assert "4300" not in str(error) and "\n" not in str(error), (path, str(error))
        else:
            # Only a float key with no upper bound may hold 1e19 (a learning rate, a static loss scale below 2**64),
            # and steps_per_print infinity (accelerate's "never print", read as None).
            assert value in (1e19, 10**19) or (path, value) == (("steps_per_print",), float("inf")), path


NVME = {"device": "nvme", "nvme_path": "/tmp/zero-swap", "buffer_count": 0}


@pytest.mark.parametrize("block, problem", [
    ("offload_param", "the parameter partitions are read into these buffers (DeepSpeed's default is 5)"),
    ("offload_optimizer", "the optimizer state is swapped through these buffers (Adam needs 3"),
])
def test_nvme_offload_without_buffers_names_its_own_buffer_count(block, problem):
    with pytest.raises(ConfigError) as info:
        load_config({"zero_optimization": {"stage": 3, block: NVME}})
    assert info.value.path == f"zero_optimization.{block}.buffer_count"
    assert str(info.value).startswith(f'zero_optimization.{block}.buffer_count: must be >= 1 when device is "nvme": '
                                      f"{problem}")
    if block == "offload_param":
        assert "optimizer" not in str(info.value)
