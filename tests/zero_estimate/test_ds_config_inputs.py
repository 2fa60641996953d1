"""A DeepSpeed ds_config as estimator inputs: each key, "auto", the batch arithmetic, one-line errors, --ds-config."""
from __future__ import annotations

import json

import pytest
from zero_estimate import (
    Cluster,
    EstimateError,
    Training,
    ZeroSettings,
    estimate,
    from_numbers,
    load_ds_config,
    settings_from_ds_config,
)
from zero_estimate._ds_config import with_stage
from zero_estimate._lines import LOCATIONS, PHASES
from zero_estimate._settings import ZERO_KEYS
from zero_plugins.ds_config import ConfigError, IgnoredConfigKeysWarning, load_config

from cli_helpers import run_main

# (ds_config, Training fields, ZeroSettings fields) it must give on 4 GPUs; fields not named keep their defaults.
MAPPINGS = [
    ({}, {"precision": "fp32"}, {}),
    ({"bf16": {"enabled": True}}, {"precision": "bf16"}, {}),
    ({"bfloat16": {"enabled": True}}, {"precision": "bf16"}, {}),
    ({"fp16": {"enabled": True, "loss_scale": 0}}, {"precision": "fp16"}, {}),
    ({"train_micro_batch_size_per_gpu": 3}, {"micro_batch": 3}, {}),
    ({"gradient_accumulation_steps": 5}, {"grad_accum": 5}, {}),
    ({"optimizer": {"type": "Adam"}}, {"optimizer": "adamw"}, {}),  # DeepSpeed's Adam is AdamW by default
    ({"optimizer": {"type": "Adam", "params": {"adam_w_mode": False}}}, {"optimizer": "adam"}, {}),
    ({"optimizer": {"type": "adamw", "params": {"lr": 1e-4}}}, {"optimizer": "adamw"}, {}),
    ({"optimizer": {"type": "SGD", "params": {"lr": 0.1}}}, {"optimizer": "sgd"}, {}),
    ({"optimizer": {"type": "SGD", "params": {"momentum": 0.9}}}, {"optimizer": "sgd-momentum"}, {}),
    ({"optimizer": {"type": "Adafactor"}}, {"optimizer": "adafactor"}, {}),
    # the kernels torch is asked for: a false fused or foreach with the other unset is its single-tensor step
    ({"optimizer": {"type": "AdamW", "params": {"fused": True}}}, {"optimizer_impl": "fused"}, {}),
    ({"optimizer": {"type": "AdamW", "params": {"foreach": True}}}, {"optimizer_impl": "foreach"}, {}),
    ({"optimizer": {"type": "AdamW", "params": {"foreach": False}}}, {"optimizer_impl": "single-tensor"}, {}),
    ({"optimizer": {"type": "AdamW", "params": {"fused": False}}}, {"optimizer_impl": "single-tensor"}, {}),
    ({"zero_optimization": {"stage": 2}}, {}, {"stage": 2}),
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}, {}, {"stage": 2,
                                                                                       "offload_optimizer": "cpu"}),
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "buffer_count": 6,
                                                                                 "nvme_path": "/local"}}}, {},
     {"stage": 3, "offload_optimizer": "nvme", "optimizer_buffer_count": 6}),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "buffer_count": 7, "buffer_size": 2e8,
                                                          "max_in_cpu": 1e6, "nvme_path": "/local"}}}, {},
     {"stage": 3, "offload_param": "nvme", "param_buffer_count": 7, "param_buffer_size": 200_000_000,
      "param_max_in_cpu": 1_000_000}),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "pin_memory": False},
                            "offload_optimizer": {"device": "cpu", "pin_memory": False}}}, {},
     {"stage": 3, "offload_param": "cpu", "offload_optimizer": "cpu", "pin_memory": False}),
    # pin_memory of an offload that is off does not matter
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                            "offload_param": {"pin_memory": False}}}, {}, {"stage": 2, "offload_optimizer": "cpu"}),
    ({"zero_optimization": {"reduce_bucket_size": 5e7, "allgather_bucket_size": 2e8}}, {},
     {"reduce_bucket_size": 50_000_000, "allgather_bucket_size": 200_000_000}),
    ({"zero_optimization": {"overlap_comm": True}}, {}, {"overlap_comm": True}),
    ({"zero_optimization": {"sub_group_size": 1e8}}, {}, {"sub_group_size": 100_000_000}),
    ({"zero_optimization": {"stage3_prefetch_bucket_size": 1e6, "stage3_param_persistence_threshold": 1e4,
                            "stage3_max_live_parameters": 1e8}}, {},
     {"stage3_prefetch_bucket_size": 1_000_000, "stage3_param_persistence_threshold": 10_000,
      "stage3_max_live_parameters": 100_000_000}),
    # DeepSpeed reads the stage-3 keys without their prefix too
    ({"zero_optimization": {"prefetch_bucket_size": 1e6, "param_persistence_threshold": 0, "max_live_parameters": 9}},
     {}, {"stage3_prefetch_bucket_size": 1_000_000, "stage3_param_persistence_threshold": 0,
          "stage3_max_live_parameters": 9}),
    ({"zero_optimization": {"memory_efficient_linear": False}}, {}, {"memory_efficient_linear": False}),
    # NVMe offload's swap slices are whole aio blocks
    ({"aio": {"block_size": 8388608}}, {}, {"aio_block_size": 8_388_608}),
]


@pytest.mark.parametrize(("ds", "training", "zero"), MAPPINGS)
def test_each_key_maps_to_its_setting(ds, training, zero):
    assert settings_from_ds_config(ds, 4) == (Training(**{"precision": "fp32", **training}), ZeroSettings(**zero))


def test_cpu_checkpointing_with_full_checkpointing():
    ds = {"activation_checkpointing": {"cpu_checkpointing": True, "partition_activations": True}}
    training, _ = settings_from_ds_config(ds, 1, checkpointing="full", seq_len=512)
    assert (training.checkpointing, training.cpu_checkpointing, training.seq_len) == ("full", True, 512)


# DeepSpeed issue #4305's block: it configures zero_core.checkpointing and turns nothing on, as in DeepSpeed.
ISSUE_4305_BLOCK = {"partition_activations": True, "cpu_checkpointing": True, "contiguous_memory_optimization": False,
                    "number_checkpoints": 5, "synchronize_checkpoint_boundary": False, "profile": False}


@pytest.mark.parametrize("checkpointing", ["none", "selective"])
def test_the_activation_checkpointing_block_changes_nothing_unless_layers_are_checkpointed(checkpointing):
    training, zero = settings_from_ds_config({"activation_checkpointing": ISSUE_4305_BLOCK}, 4,
                                             checkpointing=checkpointing)
    assert (training, zero) == settings_from_ds_config({}, 4, checkpointing=checkpointing)
    assert not training.cpu_checkpointing


def test_only_cpu_checkpointing_of_the_block_acts_under_full_checkpointing():
    """partition_activations and number_checkpoints act only with model parallelism, which zero has none of."""
    training, _ = settings_from_ds_config({"activation_checkpointing": ISSUE_4305_BLOCK}, 4, checkpointing="full")
    cpu_only, _ = settings_from_ds_config({"activation_checkpointing": {"cpu_checkpointing": True}}, 4,
                                          checkpointing="full")
    assert training == cpu_only and training.cpu_checkpointing


def test_auto_reads_as_the_key_left_out_where_the_trainer_fills_it():
    auto = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
        "zero_optimization": {
            "stage": 3,
            "reduce_bucket_size": "auto",
            "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": "auto",
        },
    }
    assert settings_from_ds_config(auto, 8) == (Training(precision="fp32"), ZeroSettings(stage=3))


@pytest.mark.parametrize(
    ("batch", "world_size", "micro_accum"),
    [
        ({"train_batch_size": 32}, 4, (8, 1)),
        ({"train_batch_size": 32, "gradient_accumulation_steps": 2}, 4, (4, 2)),
        ({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2}, 4, (2, 4)),
        ({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}, 4, (2, 4)),
        ({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3}, 4, (2, 3)),
        ({"gradient_accumulation_steps": 3}, 4, (1, 3)),
    ],
)
def test_micro_batch_and_accumulation_are_derived_as_deepspeed_does(batch, world_size, micro_accum):
    training, _ = settings_from_ds_config(batch, world_size)
    assert (training.micro_batch, training.grad_accum) == micro_accum


# Configs zero-core refuses: the estimator reads them with zero-core's parser, so the message is the same.
REFUSED_BY_ZERO_CORE = [
    {"bf16": {"enabled": True}, "fp16": {"enabled": True}},
    {"bf16": True},
    {"fp16": {"enabled": "yes"}},
    {"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2},
    {"train_batch_size": 2},
    {"train_batch_size": 30},
    {"train_micro_batch_size_per_gpu": 0},
    {"gradient_accumulation_steps": "4"},
    {"optimizer": {"type": "SGD", "params": {"momentum": "0.9"}}},
    {"optimizer": {"type": "Adam", "params": {"adam_w_mode": 0}}},
    {"optimizer": {"type": 3}},
    {"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}},  # only the Trainer fills it; initialize refuses it
    {"zero_optimization": {"stage": 4}},
    {"zero_optimization": {"stage": True}},
    {"zero_optimization": {"stage": "auto"}},
    {"zero_optimization": "auto"},
    {"zero_optimization": {"stage": 2, "overlap_comm": "auto"}},
    {"zero_optimization": {"reduce_bucket_size": "5e8"}},
    {"zero_optimization": {"reduce_bucket_size": 0}},
    {"zero_optimization": {"sub_group_size": 1.5}},
    {"zero_optimization": {"overlap_comm": "true"}},
    {"zero_optimization": {"memory_efficient_linear": 1}},
    {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "buffer_size": -1, "nvme_path": "/x"}}},
    {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}},
    {"zero_optimization": {"stage3_max_live_parameters": 1, "max_live_parameters": 1}},
    {"zero_optimization": []},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "Cpu!"}}},
    {"train_batch_size": 8, "zero_optimization": {"stage": 2}, "unknown_key": 1},
]


@pytest.mark.parametrize("ds", REFUSED_BY_ZERO_CORE, ids=lambda ds: json.dumps(ds)[:60])
def test_a_config_zero_core_refuses_is_refused_with_its_message(ds):
    with pytest.raises(ConfigError) as engine:
        load_config(ds, world_size=4)
    with pytest.raises(EstimateError) as estimator:
        settings_from_ds_config(ds, 4)
    assert str(estimator.value) == str(engine.value) and "\n" not in str(engine.value)


# What zero-core accepts but the estimate cannot model: each one line naming the key.
ESTIMATE_LIMITS = [
    ({"optimizer": {"type": "Lion"}}, "optimizer.type: ", "not 'Lion'; estimate the optimizer whose state matches"),
    ({"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "gpu"}}},
     "zero_optimization.offload_optimizer.device: ", "choose from: none, cpu, nvme"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "pin_memory": False},
                            "offload_optimizer": {"device": "cpu", "pin_memory": True}}},
     "zero_optimization.offload_param.pin_memory: ", "set both the same"),
    ({"train_micro_batch_size_per_gpu": 10**7}, "train_micro_batch_size_per_gpu: ", "at most"),
]


@pytest.mark.parametrize(("ds", "prefix", "fragment"), ESTIMATE_LIMITS)
def test_what_the_estimate_cannot_model_is_one_line_naming_the_key(ds, prefix, fragment):
    load_config(ds)  # zero-core takes it
    with pytest.raises(EstimateError) as caught:
        settings_from_ds_config(ds, 4)
    message = str(caught.value)
    assert message.startswith(prefix) and fragment in message and "\n" not in message


def test_an_offload_the_stage_does_not_use_is_dropped_with_the_engines_warning():
    ds = {"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}
    with pytest.warns(IgnoredConfigKeysWarning, match="zero_optimization.offload_param"):
        _, zero = settings_from_ds_config(ds, 4)
    assert zero == ZeroSettings(stage=2)
    with pytest.raises(EstimateError, match="^zero_optimization.offload_param.device: offloading params needs"):
        with_stage(settings_from_ds_config({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}},
                                           4)[1], 2)


def test_bad_arguments_are_named():
    with pytest.raises(EstimateError, match="^world_size: must be at least 1"):
        settings_from_ds_config({}, 0)
    with pytest.raises(EstimateError, match="^ds_config: must be a dict"):
        settings_from_ds_config([], 1)  # type: ignore[arg-type]


def test_load_ds_config_reads_a_json_object(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"train_batch_size": 8, "zero_optimization": {"stage": 2}}')
    assert load_ds_config(path) == {"train_batch_size": 8, "zero_optimization": {"stage": 2}}


@pytest.mark.parametrize("content", [None, b"\xff\xfe{}", b'{\n "stage": 2,\n}', b"[1, 2]"])
def test_load_ds_config_refuses_a_file_as_zero_core_does(tmp_path, content):
    path = tmp_path / "ds.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as engine:
        load_config(path)
    with pytest.raises(EstimateError) as estimator:
        load_ds_config(path)
    assert str(estimator.value) == str(engine.value) and str(path) in str(engine.value)
    assert "\n" not in str(engine.value)


def _write(tmp_path, ds):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(ds))
    return str(path)


DS = {
    "train_batch_size": 32,
    "gradient_accumulation_steps": 2,
    "fp16": {"enabled": True},
    "optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "reduce_bucket_size": 5e7},
}


def test_cli_ds_config_fills_the_settings_and_its_stage(capsys, tmp_path):
    args = ["--params", "1e9", "--gpus", "4", "--ds-config", _write(tmp_path, DS), "--json"]
    code, out, err = run_main(capsys, "estimate", *args)
    assert code == 0 and err == ""
    (only,) = json.loads(out)["estimates"]
    assert (only["stage"], only["offload_optimizer"]) == (2, "cpu")
    inputs = only["inputs"]
    assert (inputs["precision"], inputs["optimizer"], inputs["micro_batch"], inputs["grad_accum"]) == (
        "fp16", "sgd-momentum", 4, 2)
    assert inputs["zero"]["reduce_bucket_size"] == 50_000_000 and inputs["world_size"] == 4
    training, zero = settings_from_ds_config(DS, 4)
    api = estimate(from_numbers(1_000_000_000), Cluster(4), training, zero)
    assert only == json.loads(json.dumps(api.as_dict()))


def test_cli_flags_given_override_the_ds_config(capsys, tmp_path):
    overrides = ["--precision", "bf16", "--micro-batch", "1", "--optimizer", "adamw", "--offload-optimizer", "none",
                 "--reduce-bucket-size", "1e8", "--stage", "1,3", "--no-pin-memory"]
    args = ["--params", "1e9", "--gpus", "4", "--ds-config", _write(tmp_path, DS), *overrides, "--json"]
    code, out, err = run_main(capsys, "estimate", *args)
    assert code == 0 and err == ""
    estimates = json.loads(out)["estimates"]
    assert [e["stage"] for e in estimates] == [1, 3]
    inputs = estimates[0]["inputs"]
    assert (inputs["precision"], inputs["optimizer"], inputs["micro_batch"], inputs["grad_accum"]) == (
        "bf16", "adamw", 1, 2)  # gradient_accumulation_steps still the config's
    assert inputs["zero"]["offload_optimizer"] == "none" and inputs["zero"]["reduce_bucket_size"] == 100_000_000
    assert inputs["zero"]["pin_memory"] is False


def test_cli_without_ds_config_keeps_the_defaults(capsys):
    code, out, _ = run_main(capsys, "estimate", "--params", "1e9", "--stage", "0", "--json")
    inputs = json.loads(out)["estimates"][0]["inputs"]
    assert code == 0
    assert (inputs["precision"], inputs["optimizer"], inputs["micro_batch"], inputs["grad_accum"]) == (
        "bf16", "adamw", 1, 1)


def test_plan_reads_the_ds_config_as_the_same_flags(capsys, tmp_path):
    common = ["--gpu-memory", "16GB", "--gpus", "4", "--preset", "gpt2-xl", "--seq-len", "512", "--json"]
    code, from_config, _ = run_main(capsys, "plan", *common, "--ds-config", _write(tmp_path, DS))
    flags = ["--precision", "fp16", "--optimizer", "sgd-momentum", "--micro-batch", "4", "--grad-accum", "2",
             "--reduce-bucket-size", "5e7"]
    code_flags, from_flags, _ = run_main(capsys, "plan", *common, *flags)
    assert code == code_flags == 0
    config_plan, flags_plan = json.loads(from_config), json.loads(from_flags)
    for key in ("fits", "misses"):
        for ours, theirs in zip(config_plan[key], flags_plan[key], strict=True):
            written, flagged = ours.pop("ds_config")["config"], theirs.pop("ds_config")["config"]
            # The complete ds_configs differ by the config's own optimizer block alone (the flags give none).
            assert written.pop("optimizer") == DS["optimizer"]
            assert written == flagged
    assert config_plan == flags_plan


@pytest.mark.parametrize("ds", [{"zero_optimization": {"reduce_bucket_size": "big"}}, {"train_batch_size": 6}])
def test_cli_refuses_a_config_with_zero_cores_message(capsys, tmp_path, ds):
    path = _write(tmp_path, ds)
    with pytest.raises(ConfigError) as engine:
        load_config(path, world_size=4)
    code, out, err = run_main(capsys, "estimate", "--params", "1e9", "--gpus", "4", "--ds-config", path)
    assert (code, out, err) == (2, "", f"zero: error: {engine.value}\n")


def test_cli_estimates_the_block_as_no_block_without_checkpointing(capsys, tmp_path):
    common = ["estimate", "--preset", "gpt2-xl", "--gpus", "4", "--json", "--ds-config"]
    code, out, err = run_main(capsys, *common, _write(tmp_path, {"activation_checkpointing": ISSUE_4305_BLOCK}))
    assert code == 0, err
    (tmp_path / "plain").mkdir()
    code, plain, _ = run_main(capsys, *common, _write(tmp_path / "plain", {}))
    assert json.loads(out)["estimates"] == json.loads(plain)["estimates"]


def test_cli_full_checkpointing_flag_lets_cpu_checkpointing_act(capsys, tmp_path):
    path = _write(tmp_path, {"activation_checkpointing": {"cpu_checkpointing": True}})
    args = ["--preset", "gpt2-xl", "--ds-config", path, "--checkpointing", "full", "--json"]
    code, out, _ = run_main(capsys, "estimate", *args)
    assert code == 0
    assert json.loads(out)["estimates"][0]["activation_checkpointing"]["cpu_checkpointing"] is True


def test_cli_missing_ds_config_is_one_line(capsys, tmp_path):
    missing = tmp_path / "nope.json"
    code, _, err = run_main(capsys, "estimate", "--params", "1e9", "--ds-config", str(missing))
    assert code == 2 and err.startswith(f"zero: error: config file {missing}: ") and err.count("\n") == 1


def test_as_dict_echoes_the_inputs_and_breaks_every_location_down_by_category():
    training = Training(precision="fp16", optimizer="sgd", micro_batch=2, seq_len=256, grad_accum=3,
                        attention="flash")
    zero = ZeroSettings(stage=2, offload_optimizer="cpu", reduce_bucket_size=10**7)
    result = estimate(from_numbers(10**9), Cluster(gpus_per_node=4, nodes=2), training, zero)
    data = result.as_dict()
    assert data["inputs"] == {
        "precision": "fp16", "optimizer": "sgd", "optimizer_impl": "foreach", "micro_batch": 2, "seq_len": 256, "grad_accum": 3,
        "attention": "flash", "world_size": 8,
        "zero": {**{name: getattr(zero, name) for name in ZeroSettings.__dataclass_fields__}, "overlap_comm": False},
    }
    assert list(data["categories"]) == list(LOCATIONS)
    for where in LOCATIONS:
        assert list(data["categories"][where]) == list(PHASES)
        for phase in PHASES:
            assert data["categories"][where][phase] == result.by_category(where, phase)
    # host figures per node: the 4 processes' lines
    pinned = data["categories"]["host.pinned"]["step"]
    assert pinned == {k: 4 * v for k, v in result.by_category("host.pinned", "step", per_rank=True).items()}
    assert estimate(from_numbers(10**9)).as_dict()["inputs"]["attention"] == "sdpa"  # transformers' default


def test_zero_settings_defaults_are_the_schemas():
    """ZeroSettings is a view of the ds_config keys in ZERO_KEYS: every field but zero_init (an option of DeepSpeed's
    estimate functions) names its key, and takes that key's default in the schema (zero_plugins.ds_config), read
    from the pydantic-free table both use (an estimate from counts imports no pydantic: test_estimate_cli.py)."""
    from zero_plugins.ds_config import AioConfig, OffloadOptimizerConfig, OffloadParamConfig, ZeroOptimizationConfig

    blocks = {"zero_optimization": ZeroOptimizationConfig, "zero_optimization.offload_optimizer": OffloadOptimizerConfig,
              "zero_optimization.offload_param": OffloadParamConfig, "aio": AioConfig}
    settings = ZeroSettings()
    assert set(ZeroSettings.__dataclass_fields__) == set(ZERO_KEYS) | {"pin_memory", "zero_init"}
    for field, key in ZERO_KEYS.items():
        block, name = key.rsplit(".", 1)
        assert getattr(settings, field) == blocks[block].model_fields[name].default, field
    # pin_memory stands for both offload blocks' pin_memory, whose defaults agree.
    assert settings.pin_memory is OffloadOptimizerConfig.model_fields["pin_memory"].default is True
    assert OffloadParamConfig.model_fields["pin_memory"].default is True
    # overlap_comm left out follows the stage the same way in both.
    for stage in (0, 1, 2, 3):
        config = load_config({"zero_optimization": {"stage": stage}}).zero_optimization
        assert ZeroSettings(stage=stage).overlap is config.overlap_comm is (stage == 3)
