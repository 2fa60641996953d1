"""Well-known models, as the architecture keys of their published config.json files: one list for
`zero estimate --preset` and `zero profile --model` (which builds the causal language models among them).

Each entry of model_presets.json copies the keys that decide the parameter count from the config.json of the
Hugging Face repository it names; keys left out have transformers' defaults.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Data, not code: each entry names its repository, and its "config" holds the copied keys.
_TABLE: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).parent / "model_presets.json").read_text(encoding="utf-8"))
PRESETS: dict[str, dict[str, Any]] = {name: entry["config"] for name, entry in _TABLE.items()}


def causal_lm_presets() -> list[str]:
    """The presets `zero profile` can build: causal language models (not T5's encoder-decoder or BERT)."""
    return [name for name, config in PRESETS.items()
            if any(arch.endswith("ForCausalLM") or arch == "GPT2LMHeadModel" for arch in config.get("architectures", []))]
