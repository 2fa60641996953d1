"""Loading DeepSpeed ds_configs: example configs per stage, aliases, "auto", defaults and ignored keys."""
from __future__ import annotations

import ast
import json
import warnings
from pathlib import Path

import pytest
from zero_plugins.ds_config import ConfigError, IgnoredConfigKeysWarning, ZeroConfig, load_config

CONFIGS = Path(__file__).parent / "configs"
CONFIG_PACKAGE = Path(__file__).parents[2] / "packages" / "zero-plugins" / "src" / "zero_plugins" / "ds_config"


def load_quietly(source, **kwargs) -> ZeroConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IgnoredConfigKeysWarning)
        return load_config(source, **kwargs)


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_example_configs_load_unchanged_from_path_and_dict(path):
    text = path.read_text()
    from_path = load_quietly(path, world_size=2)
    from_str = load_quietly(str(path), world_size=2)
    from_dict = load_quietly(json.loads(text), world_size=2)
    assert from_path == from_str == from_dict
    stage = from_path.zero_optimization.stage
    assert f"stage{stage}" in path.stem
    assert from_path.train_batch_size == (
        from_path.train_micro_batch_size_per_gpu * from_path.gradient_accumulation_steps * 2
    )


def test_load_config_does_not_modify_the_dict():
    raw = json.loads((CONFIGS / "stage2_hf_auto.json").read_text())
    before = json.dumps(raw, sort_keys=True)
    load_quietly(raw, world_size=4)
    assert json.dumps(raw, sort_keys=True) == before


def test_stage1_fp16_values():
    config = load_quietly(CONFIGS / "stage1_fp16.json")
    assert config.compute_dtype == "fp16"
    assert (config.fp16.loss_scale, config.fp16.initial_scale_power, config.fp16.loss_scale_window) == (0, 16, 1000)
    assert (config.fp16.hysteresis, config.fp16.consecutive_hysteresis, config.fp16.min_loss_scale) == (2, False, 1)
    assert config.optimizer.type == "Adam"
    assert config.optimizer.params["betas"] == [0.8, 0.999]
    assert config.scheduler.type == "WarmupLR"
    assert config.scheduler.params["warmup_num_steps"] == 1000
    assert config.zero_optimization.reduce_bucket_size == 500_000_000
    assert isinstance(config.zero_optimization.reduce_bucket_size, int)
    assert config.gradient_clipping == 1.0
    assert config.steps_per_print == 100


def test_stage2_bf16_cpu_offload_values():
    config = load_config(CONFIGS / "stage2_bf16_cpu_offload.json", world_size=4)
    zero = config.zero_optimization
    assert config.compute_dtype == "bf16"
    assert (config.train_batch_size, config.train_micro_batch_size_per_gpu, config.gradient_accumulation_steps) == (
        64,
        4,
        4,
    )
    assert (zero.stage, zero.overlap_comm, zero.reduce_scatter, zero.contiguous_gradients) == (2, True, True, True)
    assert (zero.reduce_bucket_size, zero.allgather_bucket_size) == (200_000_000, 200_000_000)
    assert zero.offload_optimizer.device == "cpu"
    assert zero.offload_optimizer.pin_memory is True
    assert zero.offload_param is None
    assert config.ignored_keys == []


def test_stage3_nvme_offload_and_aio_values():
    config = load_quietly(CONFIGS / "stage3_bf16_nvme.json")
    zero = config.zero_optimization
    assert zero.overlap_comm is True  # DeepSpeed's default turns overlap on at stage 3 only
    assert (zero.stage3_max_live_parameters, zero.stage3_max_reuse_distance) == (100_000_000, 100_000_000)
    assert (zero.stage3_prefetch_bucket_size, zero.stage3_param_persistence_threshold) == (10_000_000, 100_000)
    assert (zero.sub_group_size, zero.memory_efficient_linear) == (100_000_000, False)
    param, optim = zero.offload_param, zero.offload_optimizer
    assert (param.device, str(param.nvme_path), param.buffer_count, param.buffer_size, param.max_in_cpu) == (
        "nvme",
        "/local_nvme",
        5,
        100_000_000,
        1_000_000_000,
    )
    assert (optim.device, optim.buffer_count, optim.pipeline_read, optim.pipeline_write, optim.fast_init) == (
        "nvme",
        4,
        False,
        True,
        False,
    )
    aio = config.aio
    assert (aio.block_size, aio.queue_depth, aio.intra_op_parallelism) == (262_144, 32, 2)
    assert (aio.single_submit, aio.overlap_events, aio.use_gds) == (False, True, False)


def test_stage3_legacy_spellings_are_read_as_the_current_keys():
    config = load_quietly(CONFIGS / "stage3_legacy_spellings.json")
    zero = config.zero_optimization
    assert config.bf16.enabled
    assert zero.offload_optimizer.device == "cpu"  # "cpu_offload": true
    assert zero.stage3_max_live_parameters == 300_000_000
    assert zero.stage3_max_reuse_distance == 300_000_000
    assert zero.stage3_prefetch_bucket_size == 50_000_000
    assert zero.stage3_param_persistence_threshold == 100_000
    assert zero.stage3_gather_16bit_weights_on_model_save is True
    assert config.aio.intra_op_parallelism == 4  # "thread_count"
    assert config.ignored_keys == []


def test_cpu_offload_param_legacy_flag():
    config = load_config({"zero_optimization": {"stage": 3, "cpu_offload_param": True, "cpu_offload": False}})
    assert config.zero_optimization.offload_param.device == "cpu"
    assert config.zero_optimization.offload_optimizer is None


def test_auto_values_take_deepspeeds_defaults_and_batch_sizes_are_computed():
    config = load_quietly(CONFIGS / "stage2_hf_auto.json", world_size=4)
    assert config.compute_dtype == "fp32"  # fp16/bf16 "auto": DeepSpeed's default, off
    assert config.zero_optimization.reduce_bucket_size == 500_000_000
    assert config.gradient_clipping == 1.0
    assert (config.train_batch_size, config.train_micro_batch_size_per_gpu, config.gradient_accumulation_steps) == (
        8,
        2,
        1,
    )


def test_auto_batch_sizes_stay_unset_without_world_size():
    config = load_config({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"})
    assert config.train_batch_size is None
    assert config.train_micro_batch_size_per_gpu is None


def test_steps_per_print_infinity_is_never_as_accelerate_writes_it():
    # accelerate's DeepSpeedPlugin (and the HF Trainer through it) sets float("inf") to silence DeepSpeed's prints
    assert load_config({"steps_per_print": float("inf")}).steps_per_print is None
    assert load_config({"steps_per_print": 5}).steps_per_print == 5


def test_defaults_are_deepspeeds():
    config = load_config({})
    zero = config.zero_optimization
    assert (config.gradient_clipping, config.steps_per_print, config.wall_clock_breakdown) == (1.0, None, False)
    assert config.compute_dtype == "fp32"
    assert (config.optimizer, config.scheduler) == (None, None)
    assert (zero.stage, zero.overlap_comm, zero.contiguous_gradients, zero.reduce_scatter) == (0, False, True, True)
    assert (zero.reduce_bucket_size, zero.allgather_bucket_size, zero.sub_group_size) == (5 * 10**8, 5 * 10**8, 10**9)
    assert (zero.stage3_prefetch_bucket_size, zero.stage3_param_persistence_threshold) == (5 * 10**7, 10**5)
    assert (zero.stage3_max_live_parameters, zero.stage3_max_reuse_distance) == (10**9, 10**9)
    assert zero.memory_efficient_linear is True
    assert zero.stage3_gather_16bit_weights_on_model_save is False
    assert (config.aio.block_size, config.aio.queue_depth, config.aio.intra_op_parallelism) == (1_048_576, 8, 1)
    assert config == ZeroConfig()


def test_null_aio_means_defaults():
    assert load_config({"aio": None}).aio == ZeroConfig().aio


@pytest.mark.parametrize("stage, overlap", [(0, False), (1, False), (2, False), (3, True)])
def test_overlap_comm_default_depends_on_stage(stage, overlap):
    assert load_config({"zero_optimization": {"stage": stage}}).zero_optimization.overlap_comm is overlap


@pytest.mark.parametrize(
    "fp16, bf16, dtype", [(False, False, "fp32"), (True, False, "fp16"), (False, True, "bf16")]
)
def test_compute_dtype(fp16, bf16, dtype):
    assert load_config({"fp16": {"enabled": fp16}, "bf16": {"enabled": bf16}}).compute_dtype == dtype


def test_ignored_keys_give_one_warning_naming_each_path():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = load_config(CONFIGS / "stage2_with_ignored_keys.json")
    expected = [
        "fp16.auto_cast",
        "zero_allow_untested_optimizer",
        "communication_data_type",
        "flops_profiler",
        "tensorboard",
        "zero_optimization.round_robin_gradients",
        "zero_optimization.offload_param",  # offload_param is used at stage 3 only
    ]
    assert config.ignored_keys == expected
    assert [w.category for w in caught] == [IgnoredConfigKeysWarning]
    message = str(caught[0].message)
    assert "\n" not in message
    assert all(path in message for path in expected)
    assert config.zero_optimization.offload_param is None
    assert caught[0].filename == __file__  # points at the caller of load_config


def test_no_warning_without_ignored_keys():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_config(CONFIGS / "stage0_fp32.json").ignored_keys == []


def test_offload_optimizer_at_stage_0_is_ignored():
    with pytest.warns(IgnoredConfigKeysWarning, match="zero_optimization.offload_optimizer"):
        config = load_config({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})
    assert config.zero_optimization.offload_optimizer is None


def test_offload_device_none_is_kept_and_not_ignored():
    config = load_config({"zero_optimization": {"stage": 2, "offload_param": {"device": "none"}}})
    assert config.zero_optimization.offload_param.device == "none"
    assert config.ignored_keys == []


def test_config_package_imports_no_torch():
    for path in CONFIG_PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(name.split(".")[0] in {"torch", "deepspeed"} for name in names), path


def test_dotted_top_level_keys_are_ignored_as_deepspeed_ignores_them():
    # TRL's prepare_deepspeed writes these; DeepSpeed reads nested blocks only, so they set nothing there either
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = load_config({"flops_profiler": {}, "zero_optimization": {"stage": 3},
                              "zero_optimization.reduce_bucket_size": 1024,
                              "zero_optimization.stage3_prefetch_bucket_size": 921.6})
    assert config.zero_optimization.reduce_bucket_size == 500_000_000  # the default, as on DeepSpeed
    assert config.ignored_keys == ["flops_profiler", "zero_optimization.reduce_bucket_size",
                                   "zero_optimization.stage3_prefetch_bucket_size"]
    assert [str(w.message) for w in caught] == [
        "zero accepts but ignores these DeepSpeed config keys: flops_profiler; zero ignores these dotted keys at the "
        "top level as DeepSpeed does (it reads nested blocks only; nest them in their blocks to set them): "
        "zero_optimization.reduce_bucket_size, zero_optimization.stage3_prefetch_bucket_size (see docs/config.md)"]


@pytest.mark.parametrize(("key", "error"), [
    ("zero_optimization.reduce_bucket_sz", 'zero_optimization.reduce_bucket_sz: unknown key; did you mean '
                                           '"zero_optimization"?'),
    ("optimizer.params.lr", "optimizer.params.lr: unknown key; did you mean \"optimizer\"?"),
])
def test_a_dotted_key_that_names_no_nested_key_is_still_unknown(key: str, error: str):
    with pytest.raises(ConfigError) as caught:
        load_config({key: 1})
    assert str(caught.value) == error
