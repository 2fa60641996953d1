"""Read a Hugging Face config.json (no transformers needed) into a ModelSpec with exact counts."""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from . import _checks, _hf_modules, _hf_schema
from ._errors import EstimateError
from ._spec import ModelSpec, ModuleParams, TransformerShape

Builder = Callable[[Any, bool], "tuple[list[ModuleParams], TransformerShape]"]

ARCHITECTURES: dict[str, tuple[type[_hf_schema.HFConfig], Builder]] = {
    "bert": (_hf_schema.BertConfig, _hf_modules.bert),
    "gpt2": (_hf_schema.GPT2Config, _hf_modules.gpt2),
    "gpt_neox": (_hf_schema.GPTNeoXConfig, _hf_modules.gpt_neox),
    "llama": (_hf_schema.LlamaConfig, _hf_modules.llama),
    "mistral": (_hf_schema.MistralConfig, _hf_modules.llama),
    "t5": (_hf_schema.T5Config, _hf_modules.t5),
}


def load_config_file(path: str | Path) -> dict[str, Any]:
    """The JSON object in `path` (a config.json, or a model folder that holds one)."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        reason = error.strerror or error
        raise EstimateError(f"cannot read {file}: {reason}; pass a config.json or its folder") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise EstimateError(f"{file} is not valid JSON: {error.msg} at {where}") from None
    if not isinstance(data, dict):
        raise EstimateError(f"{file} holds a JSON {type(data).__name__}, not an object of config keys")
    return data


def modules_from_config(config: Mapping[str, Any], head: bool = True) -> tuple[list[ModuleParams], TransformerShape]:
    """Validate a config dict and list its modules; errors name the key and say what it must be."""
    model_type = config.get("model_type")
    if model_type is None:
        raise EstimateError(
            f"no model_type key; supported model types: {', '.join(ARCHITECTURES)} (or pass counts with --params)"
        )
    if model_type not in ARCHITECTURES:
        _checks.unknown(
            model_type, "model_type", ARCHITECTURES, what="model type", otherwise="for others pass counts with --params"
        )
    schema, build = ARCHITECTURES[model_type]
    try:
        validated = schema.model_validate(dict(config))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or model_type
        got = f" (got {first['input']!r})" if first["loc"] else ""
        raise EstimateError(f"{first['msg'].removeprefix('Value error, ')}{got}", where) from None
    return build(validated, head)


def spec_from_config(config: Mapping[str, Any], name: str, head: bool = True) -> ModelSpec:
    modules, shape = modules_from_config(config, head)
    return ModelSpec.from_modules(name, tuple(modules), shape)
