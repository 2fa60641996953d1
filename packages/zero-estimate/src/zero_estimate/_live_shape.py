"""The transformer shape of a live Hugging Face model whose type has no builder in _hf_config (Qwen2, OPT,
Phi, Gemma, Falcon, ...): its dimensions from the config's common keys, its structure from the modules.

A gated MLP is one with a `gate_proj` (or `gate_up_proj`) module; the norms upcast when they are an RMSNorm
(Hugging Face's take their input in fp32 and save that copy). The activation's name is the config's
`hidden_act` or `activation_function`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._mlp_structure import saved_tensors
from ._spec import TransformerShape

_LAYERS = ("num_hidden_layers", "n_layer", "num_layers")
_HIDDEN = ("hidden_size", "n_embd", "d_model")
_HEADS = ("num_attention_heads", "n_head")
_KV_HEADS = ("num_key_value_heads", "multi_query_group_num", "num_kv_heads")
_WIDTH = ("intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size")
_HIDDEN_DROPOUT = ("dropout", "resid_pdrop", "hidden_dropout", "hidden_dropout_prob")
_ATTENTION_DROPOUT = ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob")


def shape_from_live(model: Any, config: Mapping[str, Any]) -> TransformerShape | None:
    """None when the config lacks the layer count, width, heads or vocabulary."""
    layers, hidden, heads = _first(config, _LAYERS), _first(config, _HIDDEN), _first(config, _HEADS)
    vocab = config.get("vocab_size")
    if not (isinstance(layers, int) and isinstance(hidden, int) and isinstance(heads, int) and isinstance(vocab, int)
            and min(layers, hidden, heads, vocab) > 0):
        return None
    names = [name.rsplit(".", 1)[-1] for name, _ in model.named_modules()]
    gated = any(name in ("gate_proj", "gate_up_proj") for name in names)
    upcast = any("RMSNorm" in type(module).__name__ for module in model.modules())
    norms = _norms_in_first_layer(model)
    activation = config.get("hidden_act") or config.get("activation_function")
    width = _first(config, _WIDTH)
    kv_heads = _first(config, _KV_HEADS)
    return TransformerShape(
        layers, hidden, heads, vocab,
        attention_dropout=_rate(config, _ATTENTION_DROPOUT), hidden_dropout=_rate(config, _HIDDEN_DROPOUT),
        intermediate_size=int(width) if isinstance(width, int) and width > 0 else None,
        mlp_saved_tensors=saved_tensors(activation if isinstance(activation, str) else None, gated),
        norm_upcast=upcast, norms_per_layer=norms if norms in (1, 2) else 2,
        num_kv_heads=kv_heads if isinstance(kv_heads, int) and 0 < kv_heads < heads else None,
    )


def _norms_in_first_layer(model: Any) -> int:
    """Norm modules of hidden width directly in the first block (q/k norms of head width are not counted)."""
    count = 0
    for name, module in model.named_modules():
        parts = name.split(".")
        if "0" in parts and parts.index("0") == len(parts) - 2 and "Norm" in type(module).__name__:
            count += 1
    return count


def _first(config: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    return next((config[key] for key in keys if config.get(key) is not None), None)


def _rate(config: Mapping[str, Any], keys: tuple[str, ...]) -> bool:
    rate = _first(config, keys)
    return isinstance(rate, (int, float)) and rate > 0
