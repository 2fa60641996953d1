"""The config.json fields of Qwen2, OPT and Phi (transformers' defaults), as _hf_schema.py has them for the others."""
from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ._hf_schema import (
    FieldPairs,
    HFConfig,
    Heads,
    Layers,
    MistralConfig,
    OptionalHeads,
    OptionalWidth,
    Positions,
    Rate,
    Vocab,
    Width,
)


class Qwen2Config(MistralConfig):
    """Llama's layer with biased q/k/v projections."""

    vocab_size: Vocab = 151936
    intermediate_size: Width = 22016
    num_key_value_heads: OptionalHeads = 32

    @property
    def qkv_bias(self) -> bool:
        return True


class _Decoder(HFConfig):
    """What OPT and Phi share: hidden size, heads (dividing it), layers, and dropout on attention's probabilities."""

    attention_dropout_field = "attention_dropout"
    divisible_fields: ClassVar[FieldPairs] = (("hidden_size", "num_attention_heads"),)  # Phi adds one

    hidden_size: Width
    num_hidden_layers: Layers
    num_attention_heads: Heads
    attention_dropout: Rate = 0.0


class OPTConfig(_Decoder):
    hidden_dropout_field = "dropout"

    vocab_size: Vocab = 50272
    hidden_size: Width = 768
    num_hidden_layers: Layers = 12
    num_attention_heads: Heads = 12
    ffn_dim: Width = 3072
    max_position_embeddings: Positions = 2048
    word_embed_proj_dim: OptionalWidth = None
    do_layer_norm_before: bool = True
    remove_final_layer_norm: bool = Field(False, alias="_remove_final_layer_norm")
    enable_bias: bool = True
    layer_norm_elementwise_affine: bool = True
    activation_function: str = "relu"
    tie_word_embeddings: bool = True
    dropout: Rate = 0.1

    @property
    def embed_dim(self) -> int:
        return self.word_embed_proj_dim or self.hidden_size


class PhiConfig(_Decoder):
    """Parallel attention and MLP behind one LayerNorm; a biased LM head."""

    hidden_dropout_field = "resid_pdrop"
    divisible_fields = _Decoder.divisible_fields + (("num_attention_heads", "num_key_value_heads"),)

    vocab_size: Vocab = 51200
    hidden_size: Width = 2048
    intermediate_size: Width = 8192
    num_hidden_layers: Layers = 24
    num_attention_heads: Heads = 32
    num_key_value_heads: OptionalHeads = None
    hidden_act: str = "gelu_new"
    qk_layernorm: bool = False
    tie_word_embeddings: bool = False
    resid_pdrop: Rate = 0.0

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads
