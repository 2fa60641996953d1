"""A DeepSpeed ds_config as estimator inputs, read by the one ds_config parser (`zero_plugins.ds_config`).

The engine and the estimator read a config through the same `load_config`, so a config the engine
refuses is refused here with the same message, and "auto", aliases and defaults mean the same in both.
What remains here is the translation into `Training` and `ZeroSettings`, and the few limits of the
estimate itself (the optimizers it models, one pinning setting for both offloads), each naming its key.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _checks
from ._errors import EstimateError
from ._settings import OFFLOAD_DEVICES, Training, ZeroSettings

if TYPE_CHECKING:  # pydantic is imported when a config is read, so estimates from counts start fast
    from zero_plugins.ds_config import (
        AioConfig,
        ConfigError,
        OffloadOptimizerConfig,
        OffloadParamConfig,
        ZeroConfig,
        ZeroOptimizationConfig,
    )

# optimizer.type, matched without case as DeepSpeed and zero-core match it -> Training.optimizer.
# DeepSpeed's Adam is AdamW unless params.adam_w_mode is false; SGD keeps a momentum buffer when momentum > 0.
_OPTIMIZERS = {"adam": "adamw", "adamw": "adamw", "sgd": "sgd", "adafactor": "adafactor"}
_OPTIMIZER_NAMES = ("Adam", "AdamW", "SGD", "Adafactor")
# ZeroSettings field -> the zero_optimization key it comes from (a field not here has its own name there).
_OFFLOAD_KEYS = {
    "offload_optimizer": "offload_optimizer.device",
    "offload_param": "offload_param.device",
    "optimizer_buffer_count": "offload_optimizer.buffer_count",
    "param_buffer_count": "offload_param.buffer_count",
    "param_buffer_size": "offload_param.buffer_size",
    "param_max_in_cpu": "offload_param.max_in_cpu",
}
# Training field -> its ds_config key, for the estimator's own bounds (a micro-batch of 1e7 samples).
_TRAINING_KEYS = {"micro_batch": "train_micro_batch_size_per_gpu", "grad_accum": "gradient_accumulation_steps"}
_ZERO_COUNTS = ("reduce_bucket_size", "allgather_bucket_size", "sub_group_size", "stage3_prefetch_bucket_size",
                "stage3_param_persistence_threshold", "stage3_max_live_parameters")


def load_ds_config(path: str | Path) -> dict[str, Any]:
    """The JSON object in the ds_config file `path`, read as zero-core reads it (one EstimateError if it cannot be)."""
    from zero_plugins.ds_config import ConfigError, read_config_file

    try:
        return read_config_file(Path(path))
    except ConfigError as error:
        raise _same_message(error) from None


def settings_from_ds_config(
    ds: Mapping[str, Any], world_size: int, *, checkpointing: str = "none", seq_len: int | None = None
) -> tuple[Training, ZeroSettings]:
    """The training loop and ZeRO settings a ds_config describes, on `world_size` data-parallel GPUs.

    The config says nothing of the model's activation checkpointing (DeepSpeed's block only
    configures it), so `checkpointing` does ("full": every layer through zero_core.checkpointing,
    where the block's cpu_checkpointing acts); nor of the sequence length, so `seq_len` does.
    Keys left out, or "auto", get DeepSpeed's defaults. The one leniency beside the engine: a config
    with neither batch size (the Trainer fills them) estimates a micro-batch of 1, or --micro-batch.
    """
    _checks.count(world_size, "world_size")
    if not isinstance(ds, Mapping):
        raise EstimateError(f"must be a dict of ds_config keys (got {type(ds).__name__})", "ds_config")
    from zero_plugins.ds_config import ConfigError, load_config, resolve_batch_sizes

    try:
        config = load_config(ds)  # warns, as initialize does, of the keys zero ignores (to stderr)
        if config.train_batch_size is not None or config.train_micro_batch_size_per_gpu is not None:
            resolve_batch_sizes(config, world_size)
    except ConfigError as error:
        raise _same_message(error) from None
    return _training(config, checkpointing, seq_len), _zero(config.zero_optimization, config.aio)


def with_stage(zero: ZeroSettings, stage: int) -> ZeroSettings:
    """`zero` at another stage; an offload the stage cannot have names its ds_config key."""
    try:
        return replace(zero, stage=stage)
    except EstimateError as error:
        raise _keyed(error, lambda field: _zero_key(field) if field in _OFFLOAD_KEYS else field) from None


def _same_message(error: ConfigError) -> EstimateError:
    """zero-core's refusal as zero-estimate's one error type, its message unchanged."""
    return EstimateError(error.problem, error.path or None)


def _training(config: ZeroConfig, checkpointing: str, seq_len: int | None) -> Training:
    # As in DeepSpeed, the block configures zero_core.checkpointing (deepspeed.checkpointing) and turns nothing on:
    # its cpu_checkpointing acts on the layers checkpointed through it, which full checkpointing stands for, and
    # leaves a model that checkpoints nothing as it is. partition_activations and number_checkpoints act only with
    # model parallelism, which zero has none of, so they change no estimate.
    activation = config.activation_checkpointing
    cpu_checkpointing = checkpointing == "full" and activation is not None and activation.cpu_checkpointing
    fields: dict[str, Any] = {
        "precision": config.compute_dtype,
        "optimizer": _optimizer(config),
        "seq_len": seq_len,
        "checkpointing": checkpointing,
        "cpu_checkpointing": cpu_checkpointing,
    }
    if config.train_micro_batch_size_per_gpu is not None:
        fields["micro_batch"] = config.train_micro_batch_size_per_gpu
    if config.gradient_accumulation_steps is not None:
        fields["grad_accum"] = config.gradient_accumulation_steps
    impl = optimizer_impl(config.optimizer.params) if config.optimizer is not None else None
    if impl is not None:
        fields["optimizer_impl"] = impl
    try:
        return Training(**fields)
    except EstimateError as error:
        raise _keyed(error, lambda field: _TRAINING_KEYS.get(field, field)) from None


def optimizer_impl(params: Mapping[str, Any]) -> str | None:
    """The kernels an optimizer block's params ask torch for; None where they leave torch to choose (a false
    `fused` or `foreach` with the other unset is torch's single-tensor step, as its optimizers read them)."""
    if params.get("fused") is True:
        return "fused"
    if params.get("foreach") is True:
        return "foreach"
    if params.get("fused") is False or params.get("foreach") is False:
        return "single-tensor"
    return None


def _optimizer(config: ZeroConfig) -> str:
    if config.optimizer is None:
        return Training.optimizer  # the client builds the optimizer: Training's default stands
    name, params = config.optimizer.type, config.optimizer.params
    if name.lower() not in _OPTIMIZERS:
        # zero-core builds more optimizers than the estimate models; Lion and Adagrad keep one fp32 state, as SGD
        # with momentum does.
        raise EstimateError(f"the estimate models {', '.join(_OPTIMIZER_NAMES)}, not {name!r}; estimate the "
                            "optimizer whose state matches (Lion and Adagrad keep one fp32 value per element, as SGD "
                            "with momentum: `zero estimate --optimizer sgd-momentum`, or optimizer.type SGD with "
                            "params.momentum above 0)", "optimizer.type")
    if name.lower() == "adam" and params.get("adam_w_mode") is False:
        return "adam"
    momentum = params.get("momentum", 0)
    if name.lower() == "sgd" and isinstance(momentum, (int, float)) and momentum > 0:
        return "sgd-momentum"
    return _OPTIMIZERS[name.lower()]


def _zero(block: ZeroOptimizationConfig, aio: AioConfig) -> ZeroSettings:
    """ZeroSettings from the keys the config sets; those it leaves out keep ZeroSettings' defaults (DeepSpeed's).
    `aio.block_size` comes along: NVMe offload's swap slices are whole blocks of it."""
    given = block.model_fields_set
    fields: dict[str, Any] = {name: getattr(block, name) for name in ("stage", *_ZERO_COUNTS) if name in given}
    if "overlap_comm" in given:
        fields["overlap_comm"] = block.overlap_comm
    for name in ("memory_efficient_linear", "step_in_backward"):
        if name in given:
            fields[name] = getattr(block, name)
    fields.update(_offload(block.offload_optimizer, block.offload_param))
    if "block_size" in aio.model_fields_set:
        fields["aio_block_size"] = aio.block_size
    try:
        return ZeroSettings(**fields)
    except EstimateError as error:
        raise _keyed(error, _zero_key) from None


def _offload(optimizer: OffloadOptimizerConfig | None, param: OffloadParamConfig | None) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    pins: dict[str, bool] = {}
    for name, block in (("offload_optimizer", optimizer), ("offload_param", param)):
        if block is None or block.device == "none":
            continue
        fields[name] = _checks.choice(block.device, f"zero_optimization.{name}.device", OFFLOAD_DEVICES)
        if "pin_memory" in block.model_fields_set:
            pins[f"zero_optimization.{name}.pin_memory"] = block.pin_memory
    if optimizer is not None and "buffer_count" in optimizer.model_fields_set:
        fields["optimizer_buffer_count"] = optimizer.buffer_count
    if param is not None:
        for key in ("buffer_count", "buffer_size", "max_in_cpu"):
            if key in param.model_fields_set:
                fields[f"param_{key}"] = getattr(param, key)
    if len(set(pins.values())) > 1:
        (first, pin), (second, _) = pins.items()
        differs = f"differs from {first} ({str(pin).lower()}); the estimate pins both or neither: set both the same"
        raise EstimateError(differs, second)
    if pins:
        fields["pin_memory"] = next(iter(pins.values()))
    return fields


def _zero_key(field: str) -> str:
    if field == "aio_block_size":
        return "aio.block_size"
    return f"zero_optimization.{_OFFLOAD_KEYS.get(field, field)}"


def _keyed(error: EstimateError, key_of: Callable[[str], str]) -> EstimateError:
    """The error with the settings field it names replaced by that field's ds_config key."""
    return EstimateError(error.reason, key_of(error.field) if error.field else None)
