"""load_config on arbitrary JSON: a ZeroConfig, or one ConfigError of one line; never another exception."""
from __future__ import annotations

import json
import math
import warnings
from typing import Any

import pytest
from zero_plugins.ds_config import ConfigError, ZeroConfig, load_config

# In requirements-dev.txt; a tox env without it skips this file.
pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# Values as json.loads gives them, plus the inf and nan that Python's json reads ("Infinity", "NaN").
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.sampled_from(["auto", "cpu", "nvme", "none", "Adam", "WarmupLR", "log", "", "\n", "1e3"])
)
JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
NUMBERS = st.integers(min_value=-3, max_value=2**66) | st.floats(allow_nan=True, allow_infinity=True)
VALUES = NUMBERS | SCALARS | st.lists(NUMBERS, max_size=3) | JSON

OPTIMIZER_KEYS = ["lr", "betas", "eps", "weight_decay", "momentum", "dampening", "nesterov", "amsgrad", "adam_w_mode",
                  "torch_adam", "etas", "step_sizes", "max_iter", "foreach", "alpha", "rho"]
SCHEDULER_KEYS = ["warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps", "warmup_type",
                  "warmup_min_ratio", "cos_min_ratio"]
BLOCKS = {
    "fp16": ["enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale",
             "consecutive_hysteresis", "auto_cast"],
    "bf16": ["enabled"],
    "zero_optimization": ["stage", "reduce_bucket_size", "allgather_bucket_size", "overlap_comm", "sub_group_size",
                          "cpu_offload", "stage3_prefetch_bucket_size", "prefetch_bucket_size", "offload_param",
                          "offload_optimizer", "round_robin_gradients"],
    "aio": ["block_size", "queue_depth", "thread_count", "intra_op_parallelism", "use_gds"],
    "activation_checkpointing": ["partition_activations", "contiguous_memory_optimization", "number_checkpoints"],
}
TOP_KEYS = ["train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
            "steps_per_print", "wall_clock_breakdown", "amp", "tensorboard", "bfloat16"]
OFFLOAD_KEYS = ["device", "nvme_path", "pin_memory", "buffer_count", "buffer_size", "max_in_cpu", "ratio"]


def _block(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(keys), VALUES, max_size=len(keys))


@st.composite
def ds_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Dicts shaped like ds_configs: known keys, in their blocks, with random values."""
    config = draw(_block(TOP_KEYS))
    for name in draw(st.lists(st.sampled_from(sorted(BLOCKS)), unique=True)):
        block = draw(_block(BLOCKS[name]))
        if name == "zero_optimization":
            for offload in ("offload_param", "offload_optimizer"):
                if offload in block and draw(st.booleans()):
                    block[offload] = draw(_block(OFFLOAD_KEYS))
        config[name] = block
    if draw(st.booleans()):
        config["optimizer"] = {"type": draw(st.sampled_from(["Adam", "AdamW", "SGD", "Rprop", 5, ""])),
                               "params": draw(_block(OPTIMIZER_KEYS) | VALUES)}
    if draw(st.booleans()):
        config["scheduler"] = {"type": draw(st.sampled_from(["WarmupLR", "WarmupDecayLR", "WarmupCosineLR"])),
                               "params": draw(_block(SCHEDULER_KEYS))}
    return config


def _check(source: object, world_size: int | None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            config = load_config(source, world_size=world_size)  # type: ignore[arg-type]
        except ConfigError as error:
            message = str(error)
            assert message and len(message.splitlines()) == 1, repr(message)
            for leak in ("Input should be", "validation error for", "type=", "For further information visit"):
                assert leak not in message, message
            return
    assert isinstance(config, ZeroConfig)
    if config.optimizer is not None:
        lr = config.optimizer.params.get("lr")
        assert lr is None or (isinstance(lr, (int, float)) and math.isfinite(lr) and lr >= 0)
    if config.fp16.enabled:
        assert 0 <= config.fp16.initial_scale_power <= 64 and math.isfinite(config.fp16.loss_scale)


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(JSON, st.sampled_from([None, 1, 4]))
def test_arbitrary_json_is_a_config_or_one_config_error(data: object, world_size: int | None) -> None:
    _check(data, world_size)


@FUZZ
@given(ds_configs(), st.sampled_from([None, 1, 3]))
def test_ds_config_shaped_dicts_are_a_config_or_one_config_error(data: dict[str, Any], world_size: int | None) -> None:
    _check(data, world_size)


@settings(max_examples=60, deadline=None)
@given(JSON)
def test_arbitrary_json_files_are_a_config_or_one_config_error(tmp_path_factory: pytest.TempPathFactory,
                                                              data: object) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "ds.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    _check(path, None)
