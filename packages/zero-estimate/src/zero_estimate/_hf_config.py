"""Read a Hugging Face config.json (no transformers needed) into a ModelSpec with exact counts."""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from zero_plugins import ConfigFileError, json_integer, read_config_text, validation_problem

from . import _checks, _hf_modules, _hf_modules_more, _hf_schema, _hf_schema_more

from ._errors import EstimateError
from ._spec import ModelSpec, ModuleParams, TransformerShape

Builder = Callable[[Any, bool], "tuple[list[ModuleParams], TransformerShape]"]

ARCHITECTURES: dict[str, tuple[type[_hf_schema.HFConfig], Builder]] = {
    "bert": (_hf_schema.BertConfig, _hf_modules.bert),
    "gpt2": (_hf_schema.GPT2Config, _hf_modules.gpt2),
    "gpt_neox": (_hf_schema.GPTNeoXConfig, _hf_modules.gpt_neox),
    "llama": (_hf_schema.LlamaConfig, _hf_modules.llama),
    "mistral": (_hf_schema.MistralConfig, _hf_modules.llama),
    "opt": (_hf_schema_more.OPTConfig, _hf_modules_more.opt),
    "phi": (_hf_schema_more.PhiConfig, _hf_modules_more.phi),
    "qwen2": (_hf_schema_more.Qwen2Config, _hf_modules.llama),
    "t5": (_hf_schema.T5Config, _hf_modules.t5),
}


def load_config_file(path: str | Path) -> dict[str, Any]:
    """The JSON object in `path` (a config.json, or a model folder that holds one)."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    try:
        text = read_config_text(file)  # a regular file of at most 16 MiB, UTF-8
    except ConfigFileError as error:
        raise EstimateError(f"cannot read {error.path}: {error.problem}") from None
    try:
        data = json.loads(text, parse_int=json_integer)
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise EstimateError(f"{file} is not valid JSON: {error.msg} at {where}") from None
    except RecursionError:
        raise EstimateError(f"{file} is not a config.json: its JSON is nested too deeply") from None
    except ValueError as error:  # an integer of more than 4300 digits
        raise EstimateError(f"{file} is not valid JSON: {error}") from None
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
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or model_type
        # Our own checks (value_error) say what they got; pydantic's own errors do not.
        got = f" (got {_short(first['input'])})" if first["loc"] and first["type"] != "value_error" else ""
        raise EstimateError(f"{_problem(first)}{got}", where) from None
    return build(validated, head)


def _problem(error: Any) -> str:
    return validation_problem(error["type"], error.get("ctx"), "is not a valid value for this key",
                              {"extra_forbidden": "is not a key of this model type"})


def _short(value: Any, limit: int = 60) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def spec_from_config(config: Mapping[str, Any], name: str, head: bool = True) -> ModelSpec:
    modules, shape = modules_from_config(config, head)
    spec = ModelSpec.from_modules(name, tuple(modules), shape)
    # Each key is within its bound, yet together they can describe more parameters than --params allows.
    if spec.total_params > _checks.MAX_PARAMS:
        raise EstimateError(
            f"the config describes {spec.total_params:.3g} parameters, more than the 1e15 any estimate takes "
            "(as --params); check its sizes (hidden size, layers, vocabulary)",
            str(config.get("model_type")),
        )
    return spec
