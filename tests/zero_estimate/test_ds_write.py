"""complete_ds_config: a plan candidate as a complete ds_config that zero's loader reads back unchanged (no torch)."""
from __future__ import annotations

import warnings

import pytest
from zero_estimate import (
    Cluster, EstimateError, Limits, LoraSpec, Training, ZeroSettings, complete_ds_config, estimate, from_preset, plan,
)
from zero_plugins.ds_config import IgnoredConfigKeysWarning, keys_deepspeed_lacks, load_config

GIB = 2**30
PYTHIA_LORA = from_preset("pythia-6.9b", lora=LoraSpec(128))


def _every_kind():
    """Every stage and offload the plan tries (NVMe too), with and without full checkpointing, LoRA on 4 GPUs."""
    result = plan(PYTHIA_LORA, Cluster(4), Limits(80 * GIB, nvme=GIB * 1024), Training(micro_batch=2, grad_accum=3))
    # 80 GiB fits every rung; checkpointing is tried only on a miss, so add the checkpointed ladder by hand.
    checkpointed = plan(PYTHIA_LORA, Cluster(4), Limits(80 * GIB, nvme=GIB * 1024),
                        Training(micro_batch=2, grad_accum=3, checkpointing="full", checkpoint_every=2))
    return [c.estimate for c in result.fits + checkpointed.fits]


def _read_back(config: dict, world_size: int):
    """zero's loader on the written config, failing on any key it would ignore."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", IgnoredConfigKeysWarning)
        return load_config(config, world_size=world_size)


def test_every_candidate_kind_reads_back_as_its_stage_offload_batch_and_precision():
    kinds = _every_kind()
    assert {(e.zero.stage, e.zero.label(), e.training.checkpointing) for e in kinds} == {
        (stage, label, checkpointing)
        for checkpointing in ("none", "full")
        for stage, label in [(0, "none/none"), (1, "none/none"), (2, "none/none"), (3, "none/none"),
                             (2, "cpu/none"), (3, "cpu/none"), (3, "cpu/cpu"), (2, "nvme/none"), (3, "nvme/none"),
                             (3, "nvme/cpu"), (3, "nvme/nvme")]
    }
    for e in kinds:
        written = complete_ds_config(e, nvme_path="/mnt/nvme")
        config = _read_back(written.config, world_size=4)
        zero = config.zero_optimization
        assert (config.train_batch_size, config.train_micro_batch_size_per_gpu) == (24, 2)
        assert (config.gradient_accumulation_steps, config.compute_dtype) == (3, "bf16")
        assert zero.stage == e.zero.stage
        for name in ("offload_optimizer", "offload_param"):
            block = getattr(zero, name)
            assert (block.device if block else "none") == getattr(e.zero, name)
        assert zero.memory_efficient_linear is True and zero.overlap_comm is (e.zero.stage == 3)
        checkpointing = config.activation_checkpointing
        assert (checkpointing.number_checkpoints if checkpointing else None) == (
            16 if e.training.checkpointing == "full" else None)
        assert written.keys_deepspeed_lacks == []
        assert "LoRA adapters of rank 128 on all-linear; the base model frozen" in written.notes


def test_the_nvme_candidate_is_written_whole():
    zero = ZeroSettings(stage=3, offload_optimizer="nvme", offload_param="nvme", pin_memory=False)
    training = Training(precision="fp16", micro_batch=1, grad_accum=2, checkpointing="full", cpu_checkpointing=True)
    written = complete_ds_config(estimate(PYTHIA_LORA, Cluster(8, 2), training, zero), nvme_path="/local_nvme")
    assert written.config == {
        "train_batch_size": 32,
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 2,
        "gradient_clipping": 1.0,
        "fp16": {"enabled": True},
        "bf16": {"enabled": False},
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "nvme", "pin_memory": False, "nvme_path": "/local_nvme",
                                  "buffer_count": 4},
            "offload_param": {"device": "nvme", "pin_memory": False, "nvme_path": "/local_nvme", "buffer_count": 5,
                              "buffer_size": 100_000_000, "max_in_cpu": 1_000_000_000},
            "reduce_bucket_size": 500_000_000,
            "allgather_bucket_size": 500_000_000,
            "sub_group_size": 1_000_000_000,
            "stage3_prefetch_bucket_size": 50_000_000,
            "stage3_param_persistence_threshold": 100_000,
            "stage3_max_live_parameters": 1_000_000_000,
            "overlap_comm": True,
            "memory_efficient_linear": True,
            # not the plan's to decide: DeepSpeed's defaults, written out
            "contiguous_gradients": True,
            "reduce_scatter": True,
            "allgather_partitions": True,
            "stage3_max_reuse_distance": 1_000_000_000,
            "stage3_gather_16bit_weights_on_model_save": False,
        },
        "aio": {"block_size": 1_048_576},
        "activation_checkpointing": {"cpu_checkpointing": True, "number_checkpoints": 32},
    }
    assert written.notes == [
        "2048 tokens per sample, sdpa attention",
        "the client's optimizer is adamw (no optimizer block is written: the plan knows no learning rate)",
        "activation checkpointing of every layer in the model (e.g. model.gradient_checkpointing_enable()); the "
        "activation_checkpointing block only configures it",
        "LoRA adapters of rank 128 on all-linear; the base model frozen",
    ]
    assert _read_back(written.config, world_size=16).aio.block_size == 1_048_576


def test_the_users_config_keeps_its_other_keys_and_loses_auto_and_second_spellings():
    base = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "bfloat16": {"enabled": "auto"},
        "fp16": {"enabled": "auto", "loss_scale_window": 100},
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-5}},
        "steps_per_print": 50,
        "zero_optimization": {
            "stage": 2,
            "cpu_offload": True,
            "contiguous_gradients": False,
            "prefetch_bucket_size": "auto",
            "reduce_bucket_size": "auto",
            "offload_optimizer": {"device": "nvme", "nvme_path": "/from/base", "pipeline_read": True},
        },
        "tensorboard": {"enabled": False},
    }
    e = estimate(PYTHIA_LORA, Cluster(2), Training(precision="fp16", micro_batch=4),
                 ZeroSettings(stage=3, offload_optimizer="nvme"))
    config = complete_ds_config(e, base).config
    assert base["zero_optimization"]["cpu_offload"] is True  # the caller's dict is left as it was
    assert (config["train_batch_size"], config["gradient_clipping"], config["steps_per_print"]) == (8, 1.0, 50)
    assert (config["fp16"], config["bf16"]) == ({"enabled": True, "loss_scale_window": 100}, {"enabled": False})
    assert "bfloat16" not in config and config["tensorboard"] == {"enabled": False}
    assert config["optimizer"] == {"type": "AdamW", "params": {"lr": 3e-5}}
    zero = config["zero_optimization"]
    assert "cpu_offload" not in zero and "prefetch_bucket_size" not in zero and zero["contiguous_gradients"] is False
    assert list(zero)[:2] == ["stage", "offload_optimizer"] and zero["reduce_scatter"] is True
    assert zero["offload_optimizer"] == {"device": "nvme", "nvme_path": "/from/base", "pipeline_read": True,
                                         "pin_memory": True, "buffer_count": 4}
    assert zero["stage3_prefetch_bucket_size"] == 50_000_000
    with pytest.warns(IgnoredConfigKeysWarning, match="ignores these DeepSpeed config keys: tensorboard "):
        loaded = load_config(config, world_size=2)
    assert loaded.ignored_keys == ["tensorboard"]
    assert loaded.zero_optimization.offload_optimizer.pipeline_read is True


def test_zeros_own_keys_are_listed_in_the_file_and_the_result():
    e = estimate(PYTHIA_LORA, Cluster(2), Training(), ZeroSettings(stage=3, step_in_backward=True))
    base = {"gradient_clipping": 0, "non_finite_steps": {"max_consecutive": 3}}
    written = complete_ds_config(e, base)
    lacks = ["non_finite_steps", "zero_optimization.step_in_backward"]
    assert written.keys_deepspeed_lacks == lacks
    assert written.config["keys_deepspeed_lacks"] == lacks
    assert _read_back(written.config, world_size=2).zero_optimization.step_in_backward is True
    assert keys_deepspeed_lacks({"zero_optimization": {"stage": 3}, "aio": {"block_size": 4096}}) == []


@pytest.mark.parametrize(
    ("base", "message"),
    [
        (None, "zero_optimization.offload_param.nvme_path: is required for NVMe offload; pass the directory on "
               "the NVMe drive (--nvme-path, or nvme_path in --ds-config)"),
        ({"zero_optimization": {"offload_param": {"nvme_path": "/a"}}, "wall_clock_breakdown": "auto"},
         'wall_clock_breakdown: is "auto", which the plan does not decide; set it in --ds-config'),
        (["stage", 3], "ds_config: must be a dict of ds_config keys (got list)"),
        ({"zero_optimization": {"offload_param": {"nvme_path": "/a"}}, "steps_per_print": 0},
         "steps_per_print: must be > 0 (got 0)"),
    ],
)
def test_what_the_plan_cannot_complete_is_an_error_naming_the_key(base, message):
    e = estimate(PYTHIA_LORA, Cluster(2), Training(), ZeroSettings(stage=3, offload_param="nvme"))
    with pytest.raises(EstimateError) as error:
        complete_ds_config(e, base)
    assert str(error.value) == message
