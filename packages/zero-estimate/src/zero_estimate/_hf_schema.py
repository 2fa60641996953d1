"""The config.json fields that decide each supported architecture's parameters.

Defaults are those of transformers' config classes, so a config.json that leaves a key out
counts as transformers would build it. Other keys are ignored. Each also reads its dropout rate on
attention's probabilities and on the hidden states (`attention_dropout_rate`, `hidden_dropout_rate`),
which decide the dropout masks and copies a layer keeps for backward.
"""
from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator

from . import _checks
from ._errors import EstimateError


# (whole, part) pairs of field names.
FieldPairs = tuple[tuple[str, str], ...]


class HFConfig(BaseModel):
    """One architecture's fields. What differs between architectures only in a field's name is class data
    read by the one property or validator below, so each rule is written once."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    # The fields holding the dropout rate on attention's probabilities and on the hidden states;
    # None: the architecture drops out no hidden states.
    attention_dropout_field: ClassVar[str]
    hidden_dropout_field: ClassVar[str | None]
    # (whole, part): attention splits `whole` evenly among `part` (the hidden size among the heads, the query
    # heads among the key/value heads). Checked in this order, so the first that fails is the error.
    divisible_fields: ClassVar[FieldPairs] = ()

    @property
    def attention_dropout_rate(self) -> float:
        return float(getattr(self, self.attention_dropout_field))

    @property
    def hidden_dropout_rate(self) -> float:
        return 0.0 if self.hidden_dropout_field is None else float(getattr(self, self.hidden_dropout_field))

    @model_validator(mode="after")
    def _divisible(self) -> HFConfig:
        for whole, part in self.divisible_fields:
            part_value = getattr(self, part)
            # A part left null (num_key_value_heads) means the whole itself, which divides it.
            if part_value is not None:
                _checks.multiple_of((whole, getattr(self, whole)), (part, part_value))
        return self


def _bounded(kind: str) -> BeforeValidator:
    """A whole number from 1 to the bound of `kind` in _checks.LIMITS: a key is checked as its flag is
    (--layers, --hidden-size, --heads, --vocab-size), and a float such as 4.096e3 is taken when whole."""

    def check(value: Any) -> Any:
        if value is None:
            return None  # null: allowed where the key is optional, else refused by the type after this
        try:
            return _checks.count(value, kind)
        except EstimateError as error:
            raise ValueError(error.reason) from None

    return BeforeValidator(check)


def _probability(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"must be a dropout probability from 0 to 1 (got {value!r})")
    return value


Layers = Annotated[int, _bounded("num_layers")]
Width = Annotated[int, _bounded("hidden_size")]  # hidden and MLP widths, head sizes
Heads = Annotated[int, _bounded("num_heads")]
Vocab = Annotated[int, _bounded("vocab_size")]
Positions = Annotated[int, _bounded("max_positions")]
OptionalLayers = Annotated[int | None, _bounded("num_layers")]
OptionalWidth = Annotated[int | None, _bounded("hidden_size")]
OptionalHeads = Annotated[int | None, _bounded("num_heads")]
Rate = Annotated[float, BeforeValidator(_probability)]


class GPTNeoXConfig(HFConfig):
    attention_dropout_field = "attention_dropout"
    hidden_dropout_field = "hidden_dropout"
    divisible_fields = (("hidden_size", "num_attention_heads"),)

    vocab_size: Vocab = 50432
    hidden_size: Width = 6144
    num_hidden_layers: Layers = 44
    num_attention_heads: Heads = 64
    intermediate_size: Width = 24576
    attention_bias: bool = True
    tie_word_embeddings: bool = False
    attention_dropout: Rate = 0.0
    hidden_dropout: Rate = 0.0
    hidden_act: str = "gelu"


class MistralConfig(HFConfig):
    attention_dropout_field = "attention_dropout"
    hidden_dropout_field = None  # Llama and Mistral drop out nothing but attention's probabilities
    # Grouped-query attention shares each key/value head among a whole number of query heads.
    divisible_fields: ClassVar[FieldPairs] = (("num_attention_heads", "num_key_value_heads"),)  # Llama adds one

    vocab_size: Vocab = 32000
    hidden_size: Width = 4096
    num_hidden_layers: Layers = 32
    num_attention_heads: Heads = 32
    num_key_value_heads: OptionalHeads = 8
    head_dim: OptionalWidth = None
    intermediate_size: Width = 14336
    tie_word_embeddings: bool = False
    attention_dropout: Rate = 0.0
    hidden_act: str = "silu"

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


class LlamaConfig(MistralConfig):
    divisible_fields = MistralConfig.divisible_fields + (("hidden_size", "num_attention_heads"),)

    num_key_value_heads: OptionalHeads = None
    intermediate_size: Width = 11008
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


class GPT2Config(HFConfig):
    attention_dropout_field = "attn_pdrop"
    hidden_dropout_field = "resid_pdrop"
    divisible_fields = (("n_embd", "n_head"),)

    vocab_size: Vocab = 50257
    n_positions: Positions = 1024
    n_embd: Width = 768
    n_layer: Layers = 12
    n_head: Heads = 12
    n_inner: OptionalWidth = None
    add_cross_attention: bool = False
    tie_word_embeddings: bool = True
    attn_pdrop: Rate = 0.1
    resid_pdrop: Rate = 0.1
    activation_function: str = "gelu_new"


class T5Config(HFConfig):
    attention_dropout_field = hidden_dropout_field = "dropout_rate"

    vocab_size: Vocab = 32128
    d_model: Width = 512
    d_kv: Width = 64
    d_ff: Width = 2048
    num_layers: Layers = 6
    num_decoder_layers: OptionalLayers = None
    num_heads: Heads = 8
    relative_attention_num_buckets: Positions = 32
    feed_forward_proj: str = "relu"
    tie_word_embeddings: bool = True
    dropout_rate: Rate = 0.1

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
    attention_dropout_field = "attention_probs_dropout_prob"
    hidden_dropout_field = "hidden_dropout_prob"
    divisible_fields = (("hidden_size", "num_attention_heads"),)

    vocab_size: Vocab = 30522
    hidden_size: Width = 768
    num_hidden_layers: Layers = 12
    num_attention_heads: Heads = 12
    intermediate_size: Width = 3072
    max_position_embeddings: Positions = 512
    type_vocab_size: Vocab = 2
    is_decoder: bool = False
    add_cross_attention: bool = False
    tie_word_embeddings: bool = True
    attention_probs_dropout_prob: Rate = 0.1
    hidden_dropout_prob: Rate = 0.1

    @model_validator(mode="after")
    def _cross_attention(self) -> BertConfig:
        if self.add_cross_attention and not self.is_decoder:
            raise ValueError("add_cross_attention needs is_decoder: true, as in transformers")
        return self
