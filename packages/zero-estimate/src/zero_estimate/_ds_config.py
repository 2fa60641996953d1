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
from typing import TYPE_CHECKING, Any, cast

from . import _checks
from ._errors import EstimateError
from ._settings import ZERO_KEYS, Training, ZeroSettings

if TYPE_CHECKING:  # pydantic is imported when a config is read, so estimates from counts start fast
    from zero_plugins.ds_config import ConfigError, ZeroConfig, ZeroOptimizationConfig
    from pydantic import BaseModel

# optimizer.type, matched without case as DeepSpeed and zero-core match it -> Training.optimizer.
# DeepSpeed's Adam is AdamW unless params.adam_w_mode is false; SGD keeps a momentum buffer when momentum > 0.
_OPTIMIZERS = {"adam": "adamw", "adamw": "adamw", "sgd": "sgd", "adafactor": "adafactor"}
_OPTIMIZER_NAMES = ("Adam", "AdamW", "SGD", "Adafactor")
# The ZeroSettings fields (and zero_optimization keys) of the two offload blocks.
_OFFLOADS = ("offload_optimizer", "offload_param")
# Training field -> its ds_config key, for the estimator's own bounds (a micro-batch of 1e7 samples).
_TRAINING_KEYS = {"micro_batch": "train_micro_batch_size_per_gpu", "grad_accum": "gradient_accumulation_steps"}


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
    return _training(config, checkpointing, seq_len), _zero(config)


def with_stage(zero: ZeroSettings, stage: int) -> ZeroSettings:
    """`zero` at another stage; an offload the stage cannot have names its ds_config key."""
    try:
        return replace(zero, stage=stage)
    except EstimateError as error:
        raise _keyed(error, lambda field: ZERO_KEYS[field] if field in _OFFLOADS else field) from None


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


def _zero(config: ZeroConfig) -> ZeroSettings:
    """ZeroSettings from the keys the config sets (ZERO_KEYS); those it leaves out keep ZeroSettings' defaults,
    which are the schema's. `aio.block_size` comes along: NVMe offload's swap slices are whole blocks of it."""
    fields: dict[str, Any] = {}
    for field, key in ZERO_KEYS.items():
        *path, name = key.split(".")
        block = _block(config, path)
        if block is not None and name in block.model_fields_set:
            fields[field] = getattr(block, name)
    fields.update(_pin_memory(config.zero_optimization))
    try:
        return ZeroSettings(**fields)
    except EstimateError as error:
        raise _keyed(error, lambda field: ZERO_KEYS.get(field, field)) from None


def _block(config: ZeroConfig, path: list[str]) -> BaseModel | None:
    """The block at `path` ("zero_optimization", "offload_param"), or None where the config has none."""
    block: Any = config
    for name in path:
        block = getattr(block, name)
        if block is None:
            return None
    return cast("BaseModel", block)


def _pin_memory(block: ZeroOptimizationConfig) -> dict[str, bool]:
    """ZeroSettings' one pin_memory from the offload blocks that offload; they must agree."""
    pins: dict[str, bool] = {}
    for name in _OFFLOADS:
        offload = getattr(block, name)
        if offload is not None and offload.device != "none" and "pin_memory" in offload.model_fields_set:
            pins[f"zero_optimization.{name}.pin_memory"] = offload.pin_memory
    if len(set(pins.values())) > 1:
        (first, pin), (second, _) = pins.items()
        differs = f"differs from {first} ({str(pin).lower()}); the estimate pins both or neither: set both the same"
        raise EstimateError(differs, second)
    return {"pin_memory": next(iter(pins.values()))} if pins else {}


def _keyed(error: EstimateError, key_of: Callable[[str], str]) -> EstimateError:
    """The error with the settings field it names replaced by that field's ds_config key."""
    return EstimateError(error.reason, key_of(error.field) if error.field else None)
