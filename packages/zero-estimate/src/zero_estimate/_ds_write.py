"""A plan candidate as a complete DeepSpeed ds_config: every value it decides written out, nothing left "auto".

The user's ds_config (if any) is the starting point: its other keys stay as they are. What the candidate decides
replaces theirs: the batch sizes (train_batch_size = micro-batch x accumulation x world size), the precision
blocks' `enabled`, the whole `zero_optimization` block's sizes and offload, `aio.block_size` under NVMe offload and
`activation_checkpointing` under full checkpointing. Keys spelled under another alias (`prefetch_bucket_size`,
`bfloat16`, the legacy `cpu_offload`) are dropped where the candidate writes the key, so no setting is given twice.

DeepSpeed 0.19.8 refuses a key it does not know inside a block (its config models forbid extra keys) and skips an
unknown top-level key. zero's own keys (`zero_optimization.step_in_backward`, `non_finite_steps`) are therefore
listed in `keys_deepspeed_lacks`, in the result and at the top of the written config: delete them to run the file
under DeepSpeed itself. zero's loader reads the list and ignores it.
"""
from __future__ import annotations

import copy
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zero_plugins import UnsafePathError, ds_default, is_link, replace_file

from ._errors import EstimateError
from ._estimate import Estimate
from ._settings import Training, ZeroSettings

# The top-level key that names, in the written file, the keys DeepSpeed does not have.
LACKS_KEY = "keys_deepspeed_lacks"
# "auto" as the Hugging Face Trainer writes it.
_AUTO = "auto"
# DeepSpeed's default for gradient_clipping, which is also how zero reads "auto" there (docs/config.md).
_CLIPPING_DEFAULT = 1.0
# ZeroSettings field -> the zero_optimization key written for it, for every stage.
_ZERO_SIZES = (
    "reduce_bucket_size",
    "allgather_bucket_size",
    "sub_group_size",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_max_live_parameters",
)
# zero_optimization keys the plan does not decide: written at DeepSpeed's defaults unless the user's block sets them.
_ZERO_DEFAULTED = (
    "contiguous_gradients",
    "reduce_scatter",
    "allgather_partitions",
    "stage3_max_reuse_distance",
    "stage3_gather_16bit_weights_on_model_save",
)


@dataclass(frozen=True)
class WrittenConfig:
    """A complete ds_config (`config`), and the dotted paths of its keys that DeepSpeed 0.19.8 does not have.

    `notes`: what the plan assumed that no ds_config key says (activation checkpointing in the model, LoRA, the
    sequence length), for the training script to match.
    """

    config: dict[str, Any]
    keys_deepspeed_lacks: list[str]
    notes: list[str]

    def json_text(self) -> str:
        return json.dumps(self.config, indent=2) + "\n"

    def as_dict(self) -> dict[str, object]:
        return {"config": self.config, LACKS_KEY: self.keys_deepspeed_lacks, "notes": self.notes}


def complete_ds_config(
    estimate: Estimate, base: Mapping[str, Any] | None = None, *, nvme_path: str | None = None
) -> WrittenConfig:
    """The complete ds_config of the configuration `estimate` was made for, over the user's `base` ds_config.

    nvme_path: the directory of NVMe offload; without it the base's `nvme_path` stands, and an NVMe offload with
    neither is an error naming the key.
    """
    from zero_plugins.ds_config import keys_deepspeed_lacks  # pydantic, imported when a config is written

    if base is not None and not isinstance(base, Mapping):
        raise EstimateError(f"must be a dict of ds_config keys (got {type(base).__name__})", "ds_config")
    config: dict[str, Any] = copy.deepcopy(dict(base or {}))
    config.pop(LACKS_KEY, None)  # listed afresh below
    training, zero = estimate.training, estimate.zero
    _batch(config, training, estimate.cluster.world_size)
    _precision(config, training.precision)
    config["zero_optimization"] = _zero_block(config.get("zero_optimization"), zero, nvme_path)
    if "nvme" in (zero.offload_optimizer, zero.offload_param):
        config["aio"] = {**_block(config, "aio"), "block_size": zero.aio_block_size}
    layers = estimate.model.shape.num_layers if estimate.model.shape else None
    if training.checkpointing == "full":
        config["activation_checkpointing"] = _checkpointing_block(config, training, layers)
    _refuse_auto(config, "")
    lacks = keys_deepspeed_lacks(config)
    if lacks:
        config[LACKS_KEY] = lacks
    _check_loads(config, estimate.cluster.world_size)
    return WrittenConfig(config, lacks, _notes(estimate, has_optimizer="optimizer" in config))


def save_ds_config(written: WrittenConfig, path: str | os.PathLike[str], *, force: bool = False) -> None:
    """Write `written` to `path` whole (staged, then renamed over it); an existing file only with `force`, and
    never a symbolic link, which would be written through or replaced."""
    target = Path(path)
    if is_link(target):
        raise EstimateError(f"{target} is a symbolic link, which zero does not write through or replace; pass "
                            "another path, or remove the link", "--write")
    if target.is_dir():
        raise EstimateError(f"{target} is a directory; pass the path of the file to write", "--write")
    if target.exists() and not force:
        raise EstimateError(f"{target} exists; pass --force to replace it, or another path", "--write")
    if not target.parent.is_dir():
        raise EstimateError(f"the directory {target.parent} does not exist; make it, or pass another path", "--write")
    try:
        replace_file(target, written.json_text().encode())
    except (OSError, UnsafePathError) as error:
        raise EstimateError(f"cannot write {target} ({error}); nothing was written", "--write") from None


def _check_loads(config: dict[str, Any], world_size: int) -> None:
    """zero's loader reads the written config (a base it refuses is refused here, with the loader's message)."""
    from zero_plugins.ds_config import ConfigError, IgnoredConfigKeysWarning, load_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IgnoredConfigKeysWarning)  # said once already, when the base was read
        try:
            load_config(config, world_size=world_size)
        except ConfigError as error:
            raise EstimateError(error.problem, error.path or "ds_config") from None


def _batch(config: dict[str, Any], training: Training, world_size: int) -> None:
    config["train_batch_size"] = training.micro_batch * training.grad_accum * world_size
    config["train_micro_batch_size_per_gpu"] = training.micro_batch
    config["gradient_accumulation_steps"] = training.grad_accum
    if config.get("gradient_clipping", _AUTO) == _AUTO:
        config["gradient_clipping"] = _CLIPPING_DEFAULT


def _precision(config: dict[str, Any], precision: str) -> None:
    # `bfloat16` is bf16's older name: one block, under the name DeepSpeed documents.
    bf16 = {**_block(config, "bfloat16"), **_block(config, "bf16")}
    config.pop("bfloat16", None)
    config["fp16"] = {**_block(config, "fp16"), "enabled": precision == "fp16"}
    config["bf16"] = {**bf16, "enabled": precision == "bf16"}


def _zero_block(given: object, zero: ZeroSettings, nvme_path: str | None) -> dict[str, Any]:
    from zero_plugins.ds_config import ZeroOptimizationConfig

    block = dict(given) if isinstance(given, Mapping) else {}
    written: dict[str, Any] = {
        "stage": zero.stage,
        "offload_optimizer": _offload(block, "offload_optimizer", zero, nvme_path),
        "offload_param": _offload(block, "offload_param", zero, nvme_path),
        **{name: getattr(zero, name) for name in _ZERO_SIZES},
        "overlap_comm": zero.overlap,
        "memory_efficient_linear": zero.memory_efficient_linear,
    }
    if zero.step_in_backward:
        written["step_in_backward"] = True
    names = ZeroOptimizationConfig.key_names()  # every spelling -> its setting
    # The legacy booleans stand for the offload blocks written here; other spellings of a written key would give
    # the setting twice.
    dropped = {key for key, field in names.items() if field in written} | {"cpu_offload", "cpu_offload_param"}
    kept = {key: value for key, value in block.items() if key not in dropped}
    # The settings the plan does not decide, at DeepSpeed's defaults where the user's block leaves them out.
    given_fields = {names[key] for key in kept if key in names}
    defaults = {key: ds_default(f"zero_optimization.{key}") for key in _ZERO_DEFAULTED if key not in given_fields}
    return {**written, **defaults, **kept}  # disjoint: the plan's settings first


def _offload(block: Mapping[str, Any], name: str, zero: ZeroSettings, nvme_path: str | None) -> dict[str, Any]:
    device = getattr(zero, name)
    given = block.get(name)
    offload: dict[str, Any] = dict(given) if isinstance(given, Mapping) else {}
    offload["device"] = device
    if device == "none":
        return offload
    offload["pin_memory"] = zero.pin_memory
    if device == "nvme":
        path = nvme_path or offload.get("nvme_path")
        if not path:
            raise EstimateError("is required for NVMe offload; pass the directory on the NVMe drive (--nvme-path, "
                                "or nvme_path in --ds-config)", f"zero_optimization.{name}.nvme_path")
        offload["nvme_path"] = str(path)
        if name == "offload_param":
            offload |= {"buffer_count": zero.param_buffer_count, "buffer_size": zero.param_buffer_size,
                        "max_in_cpu": zero.param_max_in_cpu}
        else:
            offload["buffer_count"] = zero.optimizer_buffer_count
    return offload


def _checkpointing_block(config: Mapping[str, Any], training: Training, layers: int | None) -> dict[str, Any]:
    block = {**_block(config, "activation_checkpointing"), "cpu_checkpointing": training.cpu_checkpointing}
    if layers is not None:
        block["number_checkpoints"] = training.number_checkpoints(layers)
    return block


def _block(config: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = config.get(key)
    return dict(value) if isinstance(value, Mapping) else {}


def _refuse_auto(value: object, path: str) -> None:
    """A complete config holds no "auto"; one the candidate does not decide is named, with the fix."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            _refuse_auto(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_auto(item, f"{path}[{index}]")
    elif value == _AUTO:
        raise EstimateError('is "auto", which the plan does not decide; set it in --ds-config', path)


def _notes(estimate: Estimate, *, has_optimizer: bool) -> list[str]:
    """What the plan assumed that the training script, not the ds_config, decides."""
    training, model = estimate.training, estimate.model
    notes = [f"{estimate.seq_len} tokens per sample, {training.attention} attention"]
    if not has_optimizer:
        notes.append(f"the client's optimizer is {training.optimizer} (no optimizer block is written: the plan "
                     "knows no learning rate)")
    if training.checkpointing == "full":
        every = "every layer" if training.checkpoint_every == 1 else f"every {training.checkpoint_every} layers"
        notes.append(f"activation checkpointing of {every} in the model (e.g. model.gradient_checkpointing_enable()"
                     "); the activation_checkpointing block only configures it")
    elif training.checkpointing == "selective":
        notes.append("selective activation checkpointing in the model")
    if training.offload_activations:
        notes.append("what the layers save for backward kept in pinned host memory "
                     "(zero_core.checkpointing.offload_saved_activations)")
    if model.lora is not None:
        notes.append(f"LoRA adapters of rank {model.lora.rank} on {', '.join(model.lora.targets)}; the base "
                     "model frozen")
    return notes
