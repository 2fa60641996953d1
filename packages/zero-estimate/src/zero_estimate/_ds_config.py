"""A DeepSpeed ds_config as estimator inputs: its batch, precision, optimizer and zero_optimization keys.

Keys are read by DeepSpeed's names, so an error names the dotted key to fix. Only keys that
change memory are read; the rest (learning rate, scheduler, logging) are left to zero-core's
config checks. "auto", the Hugging Face Trainer's placeholder, reads as the key left out on the keys the
Trainer fills in (TRAINER_FILLED, zero-core's rule: tests/integration/test_config_vocabulary.py), and is an
error anywhere else, as the engine reads it.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from zero_plugins import ConfigFileError, json_integer, read_config_text

from . import _checks
from ._errors import EstimateError
from ._settings import OFFLOAD_DEVICES, Training, ZeroSettings

AUTO = "auto"
# The dotted keys (with DeepSpeed's other spellings) whose "auto" the Hugging Face Trainer replaces.
TRAINER_FILLED = frozenset({
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
    "fp16.enabled", "bf16.enabled", "bfloat16.enabled", "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size", "zero_optimization.prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold", "zero_optimization.param_persistence_threshold",
})
# optimizer.type, matched without case as DeepSpeed and zero-core match it -> Training.optimizer.
# DeepSpeed's Adam is AdamW unless params.adam_w_mode is false; SGD keeps a momentum buffer when momentum > 0.
_OPTIMIZERS = {"adam": "adamw", "adamw": "adamw", "sgd": "sgd", "adafactor": "adafactor"}
_OPTIMIZER_NAMES = ("Adam", "AdamW", "SGD", "Adafactor")
# Whole-number ZeroSettings fields -> (block under zero_optimization, its key and DeepSpeed's other spellings).
_ZERO_COUNTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "reduce_bucket_size": ("", ("reduce_bucket_size",)),
    "allgather_bucket_size": ("", ("allgather_bucket_size",)),
    "sub_group_size": ("", ("sub_group_size",)),
    "stage3_prefetch_bucket_size": ("", ("stage3_prefetch_bucket_size", "prefetch_bucket_size")),
    "stage3_param_persistence_threshold": ("", ("stage3_param_persistence_threshold", "param_persistence_threshold")),
    "stage3_max_live_parameters": ("", ("stage3_max_live_parameters", "max_live_parameters")),
    "optimizer_buffer_count": ("offload_optimizer", ("buffer_count",)),
    "param_buffer_count": ("offload_param", ("buffer_count",)),
    "param_buffer_size": ("offload_param", ("buffer_size",)),
    "param_max_in_cpu": ("offload_param", ("max_in_cpu",)),
}
# ZeroSettings fields whose cross-checks (offload at the wrong stage) raise -> the key to change.
_ZERO_KEYS = {
    "offload_optimizer": "zero_optimization.offload_optimizer.device",
    "offload_param": "zero_optimization.offload_param.device",
}
_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


class _Block:
    """One object of the config, read key by key; every error names the key's dotted path."""

    def __init__(self, data: Mapping[str, Any], path: str) -> None:
        self.data, self.path = data, path

    def key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def lookup(self, *spellings: str) -> tuple[str, Any]:
        """The dotted key and value of the one spelling given; None for absent, null or a Trainer-filled "auto"."""
        given = [key for key in spellings if key in self.data]
        if len(given) > 1:
            raise EstimateError(f"same setting as {self.key(given[0])}; keep one of them", self.key(given[1]))
        if not given:
            return self.key(spellings[0]), None
        path, value = self.key(given[0]), self.data[given[0]]
        if isinstance(value, str) and value == AUTO:
            if path not in TRAINER_FILLED:
                raise EstimateError('must be a concrete value; "auto" is read only where the Hugging Face Trainer '
                                    "fills it in", path)
            return path, None
        return path, value

    def block(self, *spellings: str) -> _Block:
        path, value = self.lookup(*spellings)
        if value is not None and not isinstance(value, Mapping):
            raise EstimateError(f"must be an object {{...}} (got {value!r})", path)
        return _Block(value or {}, path)

    def flag(self, key: str) -> bool | None:
        path, value = self.lookup(key)
        if value is not None and not isinstance(value, bool):
            raise EstimateError(f"must be true or false (got {value!r})", path)
        return value

    def count(self, *spellings: str, minimum: int = 1) -> int | None:
        path, value = self.lookup(*spellings)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            quoted = ", without quotes" if isinstance(value, str) else ""
            raise EstimateError(f"must be a whole number{quoted} (got {value!r})", path)
        return _checks.count(value, path, minimum=minimum)

    def number(self, key: str) -> float | None:
        path, value = self.lookup(key)
        return None if value is None else _checks.positive_number(value, path, allow_zero=True)

    def text(self, key: str) -> str | None:
        path, value = self.lookup(key)
        if value is not None and not isinstance(value, str):
            raise EstimateError(f"must be a string (got {value!r})", path)
        return value


def load_ds_config(path: str | Path) -> dict[str, Any]:
    """The JSON object in the ds_config file `path`."""
    file = Path(path)
    try:
        text = read_config_text(file)  # a regular file of at most 16 MiB, UTF-8
    except ConfigFileError as error:
        raise EstimateError(f"cannot read {error.path}: {error.problem}", "ds_config") from None
    try:
        data = json.loads(text, parse_int=json_integer)
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise EstimateError(f"{file} is not valid JSON: {error.msg} at {where}; fix the JSON", "ds_config") from None
    if not isinstance(data, dict):
        kind = _JSON_TYPES.get(type(data), "null")
        raise EstimateError(f"{file} holds {kind}, not an object {{...}} of ds_config keys", "ds_config")
    return data


def settings_from_ds_config(
    ds: Mapping[str, Any], world_size: int, *, checkpointing: str = "none", seq_len: int | None = None
) -> tuple[Training, ZeroSettings]:
    """The training loop and ZeRO settings a ds_config describes, on `world_size` data-parallel GPUs.

    The config says nothing of the model's activation checkpointing (DeepSpeed's block only
    configures it), so `checkpointing` does; nor of the sequence length, so `seq_len` does.
    Keys left out, or "auto", get DeepSpeed's defaults; without a batch size the micro-batch is 1.
    """
    _checks.count(world_size, "world_size")
    if not isinstance(ds, Mapping):
        raise EstimateError(f"must be a dict of ds_config keys (got {type(ds).__name__})", "ds_config")
    root = _Block(ds, "")
    micro_batch, grad_accum = _batch(root, world_size)
    optimizer = _optimizer(root.block("optimizer"))
    cpu_checkpointing = _cpu_checkpointing(root.block("activation_checkpointing"), checkpointing)
    training = Training(
        precision=_precision(root),
        optimizer=optimizer,
        micro_batch=micro_batch,
        seq_len=seq_len,
        grad_accum=grad_accum,
        checkpointing=checkpointing,
        cpu_checkpointing=cpu_checkpointing,
    )
    return training, _zero(root.block("zero_optimization"))


def with_stage(zero: ZeroSettings, stage: int) -> ZeroSettings:
    """`zero` at another stage; an offload the stage cannot have names its ds_config key."""
    try:
        return replace(zero, stage=stage)
    except EstimateError as error:
        raise EstimateError(error.reason, _ZERO_KEYS.get(error.field or "", error.field)) from None


def _batch(root: _Block, world_size: int) -> tuple[int, int]:
    """(micro-batch, accumulation steps), filled in and checked as DeepSpeed does."""
    train = root.count("train_batch_size")
    micro = root.count("train_micro_batch_size_per_gpu")
    accum = root.count("gradient_accumulation_steps")
    if train is None:
        return micro or 1, accum or 1
    # DeepSpeed's floor divisions, which can give 0 or a batch that does not add up: checked below.
    if micro is None:
        micro, accum = train // world_size // (accum or 1), accum or 1
    elif accum is None:
        accum = train // micro // world_size
    if micro < 1 or accum < 1 or train != micro * accum * world_size:
        raise EstimateError(
            "must equal train_micro_batch_size_per_gpu x gradient_accumulation_steps x world size "
            f"({micro} x {accum} x {world_size} = {micro * accum * world_size}, got {train}); "
            "change one of them, or leave one out to have it computed",
            "train_batch_size",
        )
    return micro, accum


def _precision(root: _Block) -> str:
    bf16 = root.block("bf16", "bfloat16").flag("enabled")
    fp16 = root.block("fp16").flag("enabled")
    if bf16 and fp16:
        both = "is true, and so is bf16.enabled; DeepSpeed trains in one of them: disable one"
        raise EstimateError(both, "fp16.enabled")
    return "bf16" if bf16 else "fp16" if fp16 else "fp32"


def _optimizer(block: _Block) -> str:
    name = block.text("type")
    if name is None:
        return Training.optimizer  # the client builds the optimizer: Training's default stands
    if name.lower() not in _OPTIMIZERS:
        _checks.unknown(name, block.key("type"), _OPTIMIZER_NAMES, what="optimizer")
    kind, params = _OPTIMIZERS[name.lower()], block.block("params")
    if name.lower() == "adam" and params.flag("adam_w_mode") is False:
        return "adam"
    if kind == "sgd" and (params.number("momentum") or 0) > 0:
        return "sgd-momentum"
    return kind


def _cpu_checkpointing(block: _Block, checkpointing: str) -> bool:
    cpu = block.flag("cpu_checkpointing") or False
    if cpu and checkpointing != "full":
        raise EstimateError(
            f"needs full activation checkpointing (got checkpointing {checkpointing!r}); "
            "pass full checkpointing (--checkpointing full) if the model checkpoints its layers, or set this false",
            block.key("cpu_checkpointing"),
        )
    return cpu


def _zero(block: _Block) -> ZeroSettings:
    fields: dict[str, Any] = {}
    stage = block.count("stage", minimum=0)
    if stage is not None:
        if stage > 3:
            raise EstimateError(f"must be 0, 1, 2 or 3 (got {stage})", block.key("stage"))
        fields["stage"] = stage
    offload = {name: block.block(name) for name in ("offload_optimizer", "offload_param")}
    for field, (where, spellings) in _ZERO_COUNTS.items():
        minimum = 1 if field == "reduce_bucket_size" else 0  # as ZeroSettings checks them
        value = (offload[where] if where else block).count(*spellings, minimum=minimum)
        if value is not None:
            fields[field] = value
    pins: dict[str, bool] = {}
    for name, sub in offload.items():
        path, device = sub.lookup("device")
        if device is not None:
            fields[name] = _checks.choice(device, path, OFFLOAD_DEVICES)
        pin = sub.flag("pin_memory")
        if fields.get(name, "none") != "none" and pin is not None:
            pins[sub.key("pin_memory")] = pin
    if len(set(pins.values())) > 1:
        (first, pin), (second, _) = pins.items()
        differs = f"differs from {first} ({str(pin).lower()}); the estimate pins both or neither: set both the same"
        raise EstimateError(differs, second)
    if pins:
        fields["pin_memory"] = next(iter(pins.values()))
    for field in ("overlap_comm", "memory_efficient_linear"):
        flag = block.flag(field)
        if flag is not None:
            fields[field] = flag
    try:
        return ZeroSettings(**fields)
    except EstimateError as error:
        raise EstimateError(error.reason, _ZERO_KEYS.get(error.field or "", error.field)) from None
