"""The model `zero profile` trains: a Hugging Face config (a preset, or a config.json), random weights.

Nothing is downloaded: the model is built from its config with random initialisation. The "-tiny" presets are
scaled-down stand-ins for the families users train (Pythia, Llama, GPT-2, Qwen2, OPT, Phi): hidden 256,
4 layers, vocabulary 8192; their attention is `--attention`'s (_attention.py). The full-size ones (pythia-6.9b, llama-3-70b, ...) are zero-estimate's
list (zero_plugins.model_presets), for `--dry-run`, which needs no memory for them.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from zero_plugins import ZeroError, json_integer, read_config_text
from zero_plugins.model_presets import PRESETS as FULL_SIZE
from zero_plugins.model_presets import causal_lm_presets

PRESETS: dict[str, dict[str, Any]] = {
    "pythia-tiny": {"model_type": "gpt_neox", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
                    "intermediate_size": 1024, "vocab_size": 8192, "max_position_embeddings": 2048},
    "llama-tiny": {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
                   "num_key_value_heads": 8, "intermediate_size": 688, "vocab_size": 8192,
                   "max_position_embeddings": 2048},
    "gpt2-tiny": {"model_type": "gpt2", "n_embd": 256, "n_layer": 4, "n_head": 8, "vocab_size": 8192,
                  "n_positions": 1024},
    # Grouped-query attention (2 key/value heads for 8 query heads) and tied embeddings.
    "qwen2-tiny": {"model_type": "qwen2", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
                   "num_key_value_heads": 2, "intermediate_size": 704, "vocab_size": 8192,
                   "max_position_embeddings": 2048, "tie_word_embeddings": True},
    # ReLU MLP, learned positions, dropout 0.1 on the hidden states.
    "opt-tiny": {"model_type": "opt", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
                 "ffn_dim": 1024, "vocab_size": 8192, "word_embed_proj_dim": 256, "max_position_embeddings": 2048},
    # Parallel attention and MLP with one LayerNorm, gelu_new, partial rotary, a biased LM head.
    "phi-tiny": {"model_type": "phi", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
                 "intermediate_size": 1024, "vocab_size": 8192, "max_position_embeddings": 2048},
}


class ModelConfigError(ZeroError, ValueError):
    """--model names neither a preset nor a readable Hugging Face config."""


def preset_names() -> list[str]:
    return [*PRESETS, *causal_lm_presets()]


def model_config(model: str) -> dict[str, Any]:
    """The config dict of a preset name, or of a config.json (or the folder holding one)."""
    if model in PRESETS:
        return dict(PRESETS[model])
    if model in causal_lm_presets():
        return {key: value for key, value in FULL_SIZE[model].items() if key != "architectures"}
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        raise ModelConfigError(f"--model {model!r}: neither a preset ({', '.join(preset_names())}) nor a config.json; "
                               "pass a preset name or the path of a Hugging Face config.json")
    text = read_config_text(path, what="--model")  # a regular file of at most 16 MiB: never a FIFO or a device
    try:
        config = json.loads(text, parse_int=json_integer)
    except ValueError as error:  # not JSON, or an integer of more than 4300 digits
        raise ModelConfigError(f"--model {path}: not a JSON config ({error}); pass a Hugging Face config.json") \
            from None
    except RecursionError:
        raise ModelConfigError(f"--model {path}: JSON nested too deeply to read; pass a Hugging Face config.json") \
            from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelConfigError(f"--model {path}: a Hugging Face config.json has a \"model_type\"; this one has none")
    return config


def build_model(config: dict[str, Any], dtype: torch.dtype, seed: int = 0, *,
                device: str = "cpu", attention: str = "sdpa") -> torch.nn.Module:
    """A causal-LM of `config` with random weights (seeded), in training mode, cast to `dtype`, running
    transformers' `attention` implementation; on the "meta" device it holds no memory and no values (a dry run
    gives it fake storage)."""
    from transformers import AutoModelForCausalLM

    kind = config["model_type"]
    hf_config = transformers_config(config)
    torch.manual_seed(seed)
    with torch.device(device):
        try:
            model: torch.nn.Module = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
                hf_config, attn_implementation=attention)
        except ValueError:  # an encoder (BERT), an encoder-decoder (T5): no causal-LM class
            raise ModelConfigError(f"--model: model_type {kind!r} has no causal language model in transformers; "
                                   "zero profile trains causal LMs: pass the config.json of one") from None
    model.train()
    return model.to(dtype)


def transformers_config(config: dict[str, Any]) -> Any:
    """The transformers config object of `config`; one line if transformers does not know its model_type or
    refuses a value."""
    from transformers import CONFIG_MAPPING, AutoConfig

    kind = config["model_type"]
    if kind not in CONFIG_MAPPING:  # transformers' own message lists every model type it knows
        raise ModelConfigError(f"--model: model_type {kind!r} is not one transformers knows; pass the config.json "
                               "of a causal language model (llama, gpt_neox, qwen2, ...)")
    settings = {key: value for key, value in config.items() if key != "model_type"}
    try:
        return AutoConfig.for_model(kind, **settings)
    # Any error here is transformers refusing a value of the user's file (a TypeError, a ValueError, or
    # huggingface_hub's strict-dataclass validation error, which is neither): one line, not its traceback.
    except Exception as error:
        said = " ".join(line.strip() for line in str(error).strip().splitlines()[:2]) or type(error).__name__
        raise ModelConfigError(f"--model: transformers refuses this {kind} config: {said}; fix that key of the "
                               "config.json") from None


def hidden_width(config: dict[str, Any], model: str) -> int:
    """The model's hidden size (GPT-2's n_embd), which bounds --lora-rank; one line if the config's is no count."""
    key = "hidden_size" if "hidden_size" in config else "n_embd"
    width = config.get(key, 1)
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ModelConfigError(f"--model {model}: {key} must be a positive whole number (got {width!r})")
    return width


def max_positions(config: dict[str, Any]) -> int | None:
    for key in ("max_position_embeddings", "n_positions"):
        if isinstance(config.get(key), int):
            return int(config[key])
    return None
