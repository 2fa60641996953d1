"""The config.json fields that decide each supported architecture's parameters.

Defaults are those of transformers' config classes, so a config.json that leaves a key out
counts as transformers would build it. Other keys are ignored. Each also reads its dropout rate on
attention's probabilities and on the hidden states (`attention_dropout_rate`, `hidden_dropout_rate`),
which decide the dropout masks and copies a layer keeps for backward.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, NonNegativeFloat, PositiveInt, model_validator


class HFConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


def _divisible(numerator: tuple[str, int], denominator: tuple[str, int]) -> None:
    (top, a), (bottom, b) = numerator, denominator
    if a % b:
        raise ValueError(f"{top} ({a}) must be a multiple of {bottom} ({b})")


class GPTNeoXConfig(HFConfig):
    vocab_size: PositiveInt = 50432
    hidden_size: PositiveInt = 6144
    num_hidden_layers: PositiveInt = 44
    num_attention_heads: PositiveInt = 64
    intermediate_size: PositiveInt = 24576
    attention_bias: bool = True
    tie_word_embeddings: bool = False
    attention_dropout: NonNegativeFloat = 0.0
    hidden_dropout: NonNegativeFloat = 0.0
    hidden_act: str = "gelu"

    @property
    def attention_dropout_rate(self) -> float:
        return self.attention_dropout

    @property
    def hidden_dropout_rate(self) -> float:
        return self.hidden_dropout

    @model_validator(mode="after")
    def _heads(self) -> GPTNeoXConfig:
        _divisible(("hidden_size", self.hidden_size), ("num_attention_heads", self.num_attention_heads))
        return self


class MistralConfig(HFConfig):
    vocab_size: PositiveInt = 32000
    hidden_size: PositiveInt = 4096
    num_hidden_layers: PositiveInt = 32
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = 8
    head_dim: PositiveInt | None = None
    intermediate_size: PositiveInt = 14336
    tie_word_embeddings: bool = False
    attention_dropout: NonNegativeFloat = 0.0
    hidden_act: str = "silu"

    @property
    def attention_dropout_rate(self) -> float:
        return self.attention_dropout

    @property
    def hidden_dropout_rate(self) -> float:
        return 0.0  # Llama and Mistral drop out nothing but attention's probabilities

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def qkv_bias(self) -> bool:
        return False  # Mistral's projections have no biases

    @property
    def output_bias(self) -> bool:
        return False

    @property
    def mlp_biases(self) -> bool:
        return False

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @model_validator(mode="after")
    def _gqa(self) -> MistralConfig:
        # Grouped-query attention shares each key/value head among a whole number of query heads.
        _divisible(("num_attention_heads", self.num_attention_heads), ("num_key_value_heads", self.kv_heads))
        return self


class LlamaConfig(MistralConfig):
    num_key_value_heads: PositiveInt | None = None
    intermediate_size: PositiveInt = 11008
    attention_bias: bool = False
    mlp_bias: bool = False

    @property
    def qkv_bias(self) -> bool:
        return self.attention_bias

    @property
    def output_bias(self) -> bool:
        return self.attention_bias

    @property
    def mlp_biases(self) -> bool:
        return self.mlp_bias

    @model_validator(mode="after")
    def _heads(self) -> LlamaConfig:
        _divisible(("hidden_size", self.hidden_size), ("num_attention_heads", self.num_attention_heads))
        return self


class GPT2Config(HFConfig):
    vocab_size: PositiveInt = 50257
    n_positions: PositiveInt = 1024
    n_embd: PositiveInt = 768
    n_layer: PositiveInt = 12
    n_head: PositiveInt = 12
    n_inner: PositiveInt | None = None
    add_cross_attention: bool = False
    tie_word_embeddings: bool = True
    attn_pdrop: NonNegativeFloat = 0.1
    resid_pdrop: NonNegativeFloat = 0.1
    activation_function: str = "gelu_new"

    @property
    def attention_dropout_rate(self) -> float:
        return self.attn_pdrop

    @property
    def hidden_dropout_rate(self) -> float:
        return self.resid_pdrop

    @model_validator(mode="after")
    def _heads(self) -> GPT2Config:
        _divisible(("n_embd", self.n_embd), ("n_head", self.n_head))
        return self


class T5Config(HFConfig):
    vocab_size: PositiveInt = 32128
    d_model: PositiveInt = 512
    d_kv: PositiveInt = 64
    d_ff: PositiveInt = 2048
    num_layers: PositiveInt = 6
    num_decoder_layers: PositiveInt | None = None
    num_heads: PositiveInt = 8
    relative_attention_num_buckets: PositiveInt = 32
    feed_forward_proj: str = "relu"
    tie_word_embeddings: bool = True
    dropout_rate: NonNegativeFloat = 0.1

    @property
    def attention_dropout_rate(self) -> float:
        return self.dropout_rate

    @property
    def hidden_dropout_rate(self) -> float:
        return self.dropout_rate

    @property
    def gated(self) -> bool:
        return self.feed_forward_proj.startswith("gated-")

    @model_validator(mode="after")
    def _activation(self) -> T5Config:
        parts = self.feed_forward_proj.split("-")
        if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
            raise ValueError(f"feed_forward_proj must be 'ACT' or 'gated-ACT' (got {self.feed_forward_proj!r})")
        return self


class BertConfig(HFConfig):
    vocab_size: PositiveInt = 30522
    hidden_size: PositiveInt = 768
    num_hidden_layers: PositiveInt = 12
    num_attention_heads: PositiveInt = 12
    intermediate_size: PositiveInt = 3072
    max_position_embeddings: PositiveInt = 512
    type_vocab_size: PositiveInt = 2
    is_decoder: bool = False
    add_cross_attention: bool = False
    tie_word_embeddings: bool = True
    attention_probs_dropout_prob: NonNegativeFloat = 0.1
    hidden_dropout_prob: NonNegativeFloat = 0.1

    @property
    def attention_dropout_rate(self) -> float:
        return self.attention_probs_dropout_prob

    @property
    def hidden_dropout_rate(self) -> float:
        return self.hidden_dropout_prob

    @model_validator(mode="after")
    def _heads(self) -> BertConfig:
        _divisible(("hidden_size", self.hidden_size), ("num_attention_heads", self.num_attention_heads))
        if self.add_cross_attention and not self.is_decoder:
            raise ValueError("add_cross_attention needs is_decoder: true, as in transformers")
        return self
