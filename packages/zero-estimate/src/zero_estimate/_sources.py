"""Where a ModelSpec comes from: bare counts, a Hugging Face config, a preset, or a live nn.Module."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import _checks, _live
from ._errors import EstimateError
from ._lora import apply_lora
from zero_plugins.model_presets import PRESETS
from ._spec import LoraSpec, ModelSpec, ModuleParams, Shape, TransformerShape


def from_numbers(
    total_params: int,
    largest_layer_params: int | None = None,
    trainable_params: int | None = None,
    *,
    shape: TransformerShape | None = None,
    name: str = "model",
) -> ModelSpec:
    """A model known only by its counts; `shape` adds activations to the estimate."""
    total = _checks.count(total_params, "total_params")
    largest = None if largest_layer_params is None else _checks.count(largest_layer_params, "largest_layer_params")
    trainable = total if trainable_params is None else _checks.count(trainable_params, "trainable_params", minimum=0)
    for field, value in (("largest_layer_params", largest), ("trainable_params", trainable)):
        if value is not None and value > total:
            raise EstimateError(f"{value} is more than the {total} total params; it must be a part of them", field)
    if shape is not None:
        _check_shape(shape)
    return ModelSpec(name, total, trainable, largest, shape=shape)


def _check_shape(shape: TransformerShape) -> None:
    """The bounds and the heads rule a config.json's shape keys and the CLI's shape flags have."""
    for field in ("num_layers", "hidden_size", "num_heads"):
        _checks.count(getattr(shape, field), field)
    _checks.count(shape.vocab_size, "vocab_size", minimum=0)  # 0: no logits counted
    _checks.multiple_of(("hidden_size", shape.hidden_size), ("num_heads", shape.num_heads))


def from_hf_config(
    config: Mapping[str, Any] | str | Path, *, head: bool = True, lora: LoraSpec | None = None, name: str | None = None
) -> ModelSpec:
    """Exact counts from a config.json (path, model folder or dict) of a supported architecture.

    head=False counts the bare model (AutoModel) instead of the one with its LM head.
    """
    from ._hf_config import load_config_file, spec_from_config  # pydantic loads only for configs

    if isinstance(config, Mapping):
        data, label = dict(config), str(config.get("model_type", "config"))
    else:
        data, label = load_config_file(config), Path(config).name
    spec = spec_from_config(data, name or label, head)
    return apply_lora(spec, lora) if lora else spec


def from_preset(name: str, *, head: bool = True, lora: LoraSpec | None = None) -> ModelSpec:
    """A well-known model by name (see PRESETS), counted from its published config."""
    if name not in PRESETS:
        _checks.unknown(name, "preset", sorted(PRESETS), what="preset", otherwise="or pass --config or --params")
    return from_hf_config(PRESETS[name], head=head, lora=lora, name=name)


def from_module(model: Any, *, name: str | None = None) -> ModelSpec:
    """Counts and shapes of a live torch.nn.Module; trainable means requires_grad.

    Right on meta-device and ZeRO-3-partitioned models (see zero_estimate._live). A Hugging
    Face model of a supported type also gets its transformer shape, for activations.
    """
    _live.require_module(model)
    import torch  # only here: a live module means torch is installed

    seen: set[object] = set()
    modules = []
    for path, module in model.named_modules():
        trainable: list[Shape] = []
        frozen: list[Shape] = []
        tied: list[Shape] = []
        for param in module.parameters(recurse=False):
            key = _live.dedup_key(param)
            shape = tuple(getattr(param, "ds_shape", None) or param.shape)
            (tied if key in seen else trainable if param.requires_grad else frozen).append(shape)
            seen.add(key)
        if trainable or frozen or tied:
            modules.append(
                ModuleParams(
                    path or type(model).__name__,
                    tuple(trainable),
                    frozen=tuple(frozen),
                    tied=tuple(tied),
                    features=_features(module, torch),
                    saves_leaf_weight=type(module).__name__ == "Conv1D",  # addmm with the weight itself
                )
            )
    if not modules:
        raise EstimateError("the model has no parameters; pass a model with parameters, or counts", "model")
    return ModelSpec.from_modules(name or type(model).__name__, tuple(modules), _hf_shape(model))


def _features(module: Any, torch: Any) -> tuple[int, int] | None:
    if isinstance(module, torch.nn.Linear):
        return module.in_features, module.out_features
    if type(module).__name__ == "Conv1D" and hasattr(module, "nx") and hasattr(module, "nf"):
        return module.nx, module.nf  # transformers' GPT-2 projection: a linear layer with a transposed weight
    return None


def _hf_shape(model: Any) -> TransformerShape | None:
    config = getattr(model, "config", None)
    to_dict = getattr(config, "to_dict", None)
    if to_dict is None:
        return None
    from ._hf_config import ARCHITECTURES, modules_from_config

    data = to_dict()
    if data.get("model_type") not in ARCHITECTURES:
        from ._live_shape import shape_from_live

        return shape_from_live(model, data)
    return modules_from_config(data)[1]  # with the config's attention dropout rate (_hf_schema.py)
