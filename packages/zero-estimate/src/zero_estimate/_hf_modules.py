"""Every parameter of the supported Hugging Face architectures, module by module, from their configs.

`head=True` is the model with its language-modelling head, as trained (…ForCausalLM,
T5ForConditionalGeneration, BertForMaskedLM); `head=False` the bare model (AutoModel).
Shapes follow transformers 5: nn.Linear weights are (out, in), GPT-2's Conv1D (in, out).

Modules are listed in the order `model.parameters()` yields their parameters (a module's
own parameters before its children's), and a transformer block's modules are consecutive
with the same `count` (ModelSpec's convention), so the engine's reduce buckets, which are
cut in that order, can be laid out exactly (zero_estimate._partitions).
"""
from __future__ import annotations

from typing import Protocol

from ._mlp_structure import saved_tensors
from ._hf_schema import BertConfig, GPT2Config, GPTNeoXConfig, MistralConfig, T5Config
from ._spec import ModuleParams, TransformerShape

Modules = list[ModuleParams]


def _linear(
    path: str, n_in: int, n_out: int, *, bias: bool, count: int = 1, conv1d: bool = False, block: bool = False
) -> ModuleParams:
    weight = (n_in, n_out) if conv1d else (n_out, n_in)
    shapes = (weight, (n_out,)) if bias else (weight,)
    return ModuleParams(path, shapes, count=count, features=(n_in, n_out), block=block, saves_leaf_weight=conv1d)


def _block_linear(path: str, n_in: int, n_out: int, *, bias: bool, count: int, conv1d: bool = False) -> ModuleParams:
    """A linear layer repeated in every transformer block: where LoRA targets are looked for."""
    return _linear(path, n_in, n_out, bias=bias, count=count, conv1d=conv1d, block=True)


def _norm(path: str, size: int, *, bias: bool = True, count: int = 1) -> ModuleParams:
    return ModuleParams(path, ((size,), (size,)) if bias else ((size,),), count=count)


def _embedding(path: str, rows: int, size: int) -> ModuleParams:
    return ModuleParams(path, ((rows, size),))


class _DropoutRates(Protocol):
    @property
    def attention_dropout_rate(self) -> float: ...

    @property
    def hidden_dropout_rate(self) -> float: ...


def _dropout_of(c: _DropoutRates) -> dict[str, bool]:
    """Which dropouts the model applies in training: a rate of 0 makes torch's dropout return its input."""
    return {"attention_dropout": c.attention_dropout_rate > 0, "hidden_dropout": c.hidden_dropout_rate > 0}


def _lm_head(path: str, hidden: int, vocab: int, *, tied: bool, bias: bool = False) -> ModuleParams:
    """The output projection; when tied it reuses the input embedding, which owns the weight (a bias, Phi's,
    is the head's own either way)."""
    weight = ((vocab, hidden),)
    own_bias = ((vocab,),) if bias else ()
    if tied:
        return ModuleParams(path, own_bias, tied=weight, features=(hidden, vocab))
    return ModuleParams(path, weight + own_bias, features=(hidden, vocab))


def _self_attention(h: int, q: int, kv: int, output: str, *, bias: bool, output_bias: bool, count: int) -> Modules:
    """Llama's and Phi's `layers.self_attn`: q, k and v projections from the hidden size `h` (k and v to the
    key/value heads' width `kv`), then the output projection named `output` back from `q`."""
    return [
        _block_linear("layers.self_attn.q_proj", h, q, bias=bias, count=count),
        _block_linear("layers.self_attn.k_proj", h, kv, bias=bias, count=count),
        _block_linear("layers.self_attn.v_proj", h, kv, bias=bias, count=count),
        _block_linear(f"layers.self_attn.{output}", q, h, bias=output_bias, count=count),
    ]


def gpt_neox(c: GPTNeoXConfig, head: bool) -> tuple[Modules, TransformerShape]:
    h, i, n = c.hidden_size, c.intermediate_size, c.num_hidden_layers
    modules = [
        _embedding("embed_in", c.vocab_size, h),
        _norm("layers.input_layernorm", h, count=n),
        _norm("layers.post_attention_layernorm", h, count=n),
        _block_linear("layers.attention.query_key_value", h, 3 * h, bias=c.attention_bias, count=n),
        _block_linear("layers.attention.dense", h, h, bias=c.attention_bias, count=n),
        _block_linear("layers.mlp.dense_h_to_4h", h, i, bias=True, count=n),
        _block_linear("layers.mlp.dense_4h_to_h", i, h, bias=True, count=n),
        _norm("final_layer_norm", h),
    ]
    if head:
        modules.append(_lm_head("lm_head", h, c.vocab_size, tied=c.tie_word_embeddings))
    return modules, TransformerShape(
        n, h, c.num_attention_heads, c.vocab_size, **_dropout_of(c), intermediate_size=i,
        mlp_saved_tensors=saved_tensors(c.hidden_act, gated=False),
    )


def llama(c: MistralConfig, head: bool) -> tuple[Modules, TransformerShape]:
    """Llama, Mistral and Qwen2: grouped-query attention (k and v have num_key_value_heads heads), SwiGLU MLP;
    the config says which projections have biases (Qwen2: q, k and v)."""
    h, i, n, d = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.head_size
    attention_bias, output_bias, mlp_bias = c.qkv_bias, c.output_bias, c.mlp_biases
    q, kv = c.num_attention_heads * d, c.kv_heads * d
    modules = [
        _embedding("embed_tokens", c.vocab_size, h),
        *_self_attention(h, q, kv, "o_proj", bias=attention_bias, output_bias=output_bias, count=n),
        _block_linear("layers.mlp.gate_proj", h, i, bias=mlp_bias, count=n),
        _block_linear("layers.mlp.up_proj", h, i, bias=mlp_bias, count=n),
        _block_linear("layers.mlp.down_proj", i, h, bias=mlp_bias, count=n),
        _norm("layers.input_layernorm", h, bias=False, count=n),
        _norm("layers.post_attention_layernorm", h, bias=False, count=n),
        _norm("norm", h, bias=False),
    ]
    if head:
        modules.append(_lm_head("lm_head", h, c.vocab_size, tied=c.tie_word_embeddings))
    return modules, TransformerShape(
        n, h, c.num_attention_heads, c.vocab_size, **_dropout_of(c), intermediate_size=i,
        mlp_saved_tensors=saved_tensors(c.hidden_act, gated=True), norm_upcast=True,
        num_kv_heads=c.kv_heads if c.kv_heads != c.num_attention_heads else None,
    )


def gpt2(c: GPT2Config, head: bool) -> tuple[Modules, TransformerShape]:
    h, n = c.n_embd, c.n_layer
    inner = c.n_inner or 4 * h
    modules = [
        _embedding("wte", c.vocab_size, h),
        _embedding("wpe", c.n_positions, h),
        _norm("h.ln_1", h, count=n),
        _block_linear("h.attn.c_attn", h, 3 * h, bias=True, count=n, conv1d=True),
        _block_linear("h.attn.c_proj", h, h, bias=True, count=n, conv1d=True),
        _norm("h.ln_2", h, count=n),
    ]
    if c.add_cross_attention:
        modules += [
            _block_linear("h.crossattention.c_attn", h, 2 * h, bias=True, count=n, conv1d=True),
            _block_linear("h.crossattention.q_attn", h, h, bias=True, count=n, conv1d=True),
            _block_linear("h.crossattention.c_proj", h, h, bias=True, count=n, conv1d=True),
            _norm("h.ln_cross_attn", h, count=n),
        ]
    modules += [
        _block_linear("h.mlp.c_fc", h, inner, bias=True, count=n, conv1d=True),
        _block_linear("h.mlp.c_proj", inner, h, bias=True, count=n, conv1d=True),
        _norm("ln_f", h),
    ]
    if head:
        modules.append(_lm_head("lm_head", h, c.vocab_size, tied=c.tie_word_embeddings))
    return modules, TransformerShape(
        n, h, c.n_head, c.vocab_size, max_positions=c.n_positions, **_dropout_of(c), intermediate_size=inner,
        mlp_saved_tensors=saved_tensors(c.activation_function, gated=False),
    )


def _t5_attention(prefix: str, c: T5Config, count: int) -> Modules:
    d, inner = c.d_model, c.num_heads * c.d_kv
    return [
        _block_linear(f"{prefix}.q", d, inner, bias=False, count=count),
        _block_linear(f"{prefix}.k", d, inner, bias=False, count=count),
        _block_linear(f"{prefix}.v", d, inner, bias=False, count=count),
        _block_linear(f"{prefix}.o", inner, d, bias=False, count=count),
    ]


def _t5_feed_forward(prefix: str, c: T5Config, count: int) -> Modules:
    d, ff = c.d_model, c.d_ff
    inputs = ["wi_0", "wi_1"] if c.gated else ["wi"]
    return [_block_linear(f"{prefix}.{name}", d, ff, bias=False, count=count) for name in inputs] + [
        _block_linear(f"{prefix}.wo", ff, d, bias=False, count=count)
    ]


def t5(c: T5Config, head: bool) -> tuple[Modules, TransformerShape]:
    """Encoder and decoder share the `shared` embedding; block 0 of each stack owns the relative position bias.

    Block 0 is listed on its own (its bias sits between its attention and its layer norm), then
    the other blocks as one repeated block.
    """
    d, n_enc = c.d_model, c.num_layers
    n_dec = c.num_decoder_layers or n_enc
    modules = [_embedding("shared", c.vocab_size, d)]
    for stack, n in (("encoder", n_enc), ("decoder", n_dec)):
        modules.append(ModuleParams(f"{stack}.embed_tokens", tied=((c.vocab_size, d),)))
        modules += _t5_block(f"{stack}.block.0", c, 1, decoder=stack == "decoder", first=True)
        if n > 1:
            modules += _t5_block(f"{stack}.block", c, n - 1, decoder=stack == "decoder", first=False)
        modules.append(_norm(f"{stack}.final_layer_norm", d, bias=False))
    if head:
        modules.append(_lm_head("lm_head", d, c.vocab_size, tied=c.tie_word_embeddings))
    return modules, TransformerShape(
        n_enc + n_dec, d, c.num_heads, c.vocab_size, **_dropout_of(c)
    )


def _t5_block(prefix: str, c: T5Config, count: int, *, decoder: bool, first: bool) -> Modules:
    d = c.d_model
    modules = _t5_attention(f"{prefix}.layer.0.SelfAttention", c, count)
    if first:
        bias_table = (c.relative_attention_num_buckets, c.num_heads)
        modules.append(ModuleParams(f"{prefix}.layer.0.SelfAttention.relative_attention_bias", (bias_table,)))
    modules.append(_norm(f"{prefix}.layer.0.layer_norm", d, bias=False, count=count))
    if decoder:
        modules += _t5_attention(f"{prefix}.layer.1.EncDecAttention", c, count)
        modules.append(_norm(f"{prefix}.layer.1.layer_norm", d, bias=False, count=count))
    ff = "layer.2" if decoder else "layer.1"
    modules += _t5_feed_forward(f"{prefix}.{ff}.DenseReluDense", c, count)
    modules.append(_norm(f"{prefix}.{ff}.layer_norm", d, bias=False, count=count))
    return modules


def _bert_attention(prefix: str, h: int, n: int) -> Modules:
    return [
        _block_linear(f"{prefix}.self.query", h, h, bias=True, count=n),
        _block_linear(f"{prefix}.self.key", h, h, bias=True, count=n),
        _block_linear(f"{prefix}.self.value", h, h, bias=True, count=n),
        _block_linear(f"{prefix}.output.dense", h, h, bias=True, count=n),
        _norm(f"{prefix}.output.LayerNorm", h, count=n),
    ]


def _bert_shape(c: BertConfig) -> TransformerShape:
    return TransformerShape(c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.vocab_size,
                            max_positions=c.max_position_embeddings, **_dropout_of(c))


def bert(c: BertConfig, head: bool) -> tuple[Modules, TransformerShape]:
    """BertModel with its pooler, or BertForMaskedLM (no pooler; an MLM head whose decoder is tied)."""
    h, i, n, v = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.vocab_size
    modules = [
        _embedding("embeddings.word_embeddings", v, h),
        _embedding("embeddings.position_embeddings", c.max_position_embeddings, h),
        _embedding("embeddings.token_type_embeddings", c.type_vocab_size, h),
        _norm("embeddings.LayerNorm", h),
        *_bert_attention("encoder.layer.attention", h, n),
    ]
    if c.add_cross_attention:
        modules += _bert_attention("encoder.layer.crossattention", h, n)
    modules += [
        _block_linear("encoder.layer.intermediate.dense", h, i, bias=True, count=n),
        _block_linear("encoder.layer.output.dense", i, h, bias=True, count=n),
        _norm("encoder.layer.output.LayerNorm", h, count=n),
    ]
    if not head:
        modules.append(_linear("pooler.dense", h, h, bias=True))
        return modules, _bert_shape(c)
    # cls.predictions owns its bias, so that comes before its children's parameters.
    modules += [
        ModuleParams("cls.predictions", ((v,),)),
        _linear("cls.predictions.transform.dense", h, h, bias=True),
        _norm("cls.predictions.transform.LayerNorm", h),
    ]
    if c.tie_word_embeddings:
        # The decoder's weight is the word embedding and its bias is cls.predictions.bias.
        modules.append(ModuleParams("cls.predictions.decoder", tied=((v, h), (v,)), features=(h, v)))
    else:
        modules.append(_linear("cls.predictions.decoder", h, v, bias=True))
    return modules, _bert_shape(c)
