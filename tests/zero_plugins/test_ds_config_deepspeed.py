"""Our defaults and readings against DeepSpeed's own config code (skipped when deepspeed is not installed)."""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import BaseModel
from zero_plugins.ds_config import (
    AioConfig,
    BF16Config,
    FP16Config,
    IgnoredConfigKeysWarning,
    OffloadOptimizerConfig,
    OffloadParamConfig,
    ZeroConfig,
    ZeroOptimizationConfig,
    load_config,
)

CONFIGS = Path(__file__).parent / "configs"
# HF Trainer configs hold "auto", which DeepSpeed itself cannot read until the Trainer fills it in.
DEEPSPEED_READABLE = sorted(p for p in CONFIGS.glob("*.json") if "auto" not in p.stem)


@pytest.fixture(scope="module")
def ds() -> SimpleNamespace:
    """DeepSpeed's config modules."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DS_ACCELERATOR", "cpu")  # DeepSpeed picks its accelerator on import
        pytest.importorskip("deepspeed")
        from deepspeed.runtime import config, constants, precision_config
        from deepspeed.runtime.swap_tensor import aio_config
        from deepspeed.runtime.zero import config as zero_config
        from deepspeed.runtime.zero import offload_config

    return SimpleNamespace(
        config=config,
        constants=constants,
        precision=precision_config,
        aio=aio_config,
        zero=zero_config,
        offload=offload_config,
    )


def _ds_names(model: type[BaseModel]) -> set[str]:
    """Every key a DeepSpeed block accepts: field names and aliases."""
    names = set()
    for name, info in model.model_fields.items():
        names.add(name)
        if info.alias:
            names.add(info.alias)
    return names


def _ds_attr(ds_model: BaseModel, our_name: str) -> str:
    """DeepSpeed names its stage-3 attributes without the `stage3_` prefix that we keep."""
    return our_name if our_name in type(ds_model).model_fields else our_name.removeprefix("stage3_")


def _assert_same_fields(ours: BaseModel, theirs: BaseModel, skip: frozenset[str] = frozenset()) -> None:
    for name in type(ours).model_fields:
        if name in skip:
            continue
        assert getattr(ours, name) == getattr(theirs, _ds_attr(theirs, name)), name


def _block_pairs(ds: SimpleNamespace) -> list[tuple[type[BaseModel], type[BaseModel]]]:
    return [
        (ZeroOptimizationConfig, ds.zero.DeepSpeedZeroConfig),
        (OffloadParamConfig, ds.offload.DeepSpeedZeroOffloadParamConfig),
        (OffloadOptimizerConfig, ds.offload.DeepSpeedZeroOffloadOptimizerConfig),
        (FP16Config, ds.precision.DeepSpeedFP16Config),
        (BF16Config, ds.precision.DeepSpeedBF16Config),
    ]


def test_block_defaults_equal_deepspeeds(ds):
    for ours, theirs in _block_pairs(ds):
        _assert_same_fields(ours(), theirs(), skip=frozenset({"cpu_offload", "cpu_offload_param"}) | ours.ZERO_ONLY)


def test_top_level_and_aio_defaults_equal_deepspeeds(ds):
    constants, aio = ds.constants, ds.aio
    config = ZeroConfig()
    assert config.gradient_clipping == constants.GRADIENT_CLIPPING_DEFAULT
    assert config.steps_per_print == constants.STEPS_PER_PRINT_DEFAULT
    assert config.wall_clock_breakdown == constants.WALL_CLOCK_BREAKDOWN_DEFAULT
    assert config.train_batch_size == constants.TRAIN_BATCH_SIZE_DEFAULT
    assert AioConfig().model_dump() == aio.AIO_DEFAULT_DICT


def test_every_deepspeed_key_of_a_block_is_supported_or_ignored(ds):
    for ours, theirs in _block_pairs(ds):
        accepted = set(ours.key_names())
        assert _ds_names(theirs) <= accepted | ours.IGNORED, ours.__name__
        assert ours.IGNORED <= _ds_names(theirs), ours.__name__  # we ignore only keys DeepSpeed has


@pytest.mark.parametrize("path", DEEPSPEED_READABLE, ids=lambda p: p.stem)
def test_example_configs_read_as_deepspeed_reads_them(ds, path):
    raw = json.loads(path.read_text())
    theirs = ds.config.DeepSpeedConfig(raw)  # world size 1 without torch.distributed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IgnoredConfigKeysWarning)
        ours = load_config(raw, world_size=1)
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        assert getattr(ours, key) == getattr(theirs, key), key
    assert ours.gradient_clipping == theirs.gradient_clipping
    assert ours.steps_per_print == theirs.steps_per_print
    _assert_same_fields(ours.fp16, theirs.float16_config)
    _assert_same_fields(ours.bf16, theirs.bfloat16_config)
    if ours.optimizer is not None:
        assert ours.optimizer.type.lower() == theirs.optimizer_name.lower()  # DeepSpeed lowercases its own
        assert ours.optimizer.params == theirs.optimizer_params
    zero, ds_zero = ours.zero_optimization, theirs.zero_config
    blocks = frozenset({"cpu_offload", "cpu_offload_param", "offload_param", "offload_optimizer"})
    _assert_same_fields(zero, ds_zero, skip=blocks | ZeroOptimizationConfig.ZERO_ONLY)
    for name in ("offload_param", "offload_optimizer"):
        block, ds_block = getattr(zero, name), getattr(ds_zero, name)
        if block is None and ds_block is not None:
            assert f"zero_optimization.{name}" in ours.ignored_keys  # unused at this stage: ignored, with a warning
        else:
            assert (block is None) == (ds_block is None), name
            if block is not None:
                _assert_same_fields(block, ds_block)
    # DeepSpeed 0.19 reads only `intra_op_parallelism`; we also read the older `thread_count`.
    if "thread_count" not in raw.get("aio", {}):
        assert ours.aio.model_dump() == theirs.aio_config
