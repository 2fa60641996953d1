"""Every parameter of OPT and Phi, module by module, in `model.parameters()` order (see _hf_modules; Qwen2
is Llama's builder)."""
from __future__ import annotations

from ._hf_modules import (
    Modules,
    _block_linear,
    _dropout_of,
    _embedding,
    _linear,
    _lm_head,
    _norm,
    _self_attention,
)
from ._hf_schema_more import OPTConfig, PhiConfig
from ._mlp_structure import saved_tensors
from ._spec import ModuleParams, TransformerShape


def opt(c: OPTConfig, head: bool) -> tuple[Modules, TransformerShape]:
    """OPT's decoder: learned positions (offset by 2), optional projections around a narrower embedding."""
    h, e, n, f = c.hidden_size, c.embed_dim, c.num_hidden_layers, c.ffn_dim
    affine = c.layer_norm_elementwise_affine

    def norm(path: str, count: int = 1) -> list[ModuleParams]:
        return [_norm(path, h, count=count)] if affine else []

    modules = [_embedding("decoder.embed_tokens", c.vocab_size, e),
               _embedding("decoder.embed_positions", c.max_position_embeddings + 2, h)]
    if e != h:
        modules += [_linear("decoder.project_out", h, e, bias=False), _linear("decoder.project_in", e, h, bias=False)]
    if c.do_layer_norm_before and not c.remove_final_layer_norm:
        modules += norm("decoder.final_layer_norm")
    bias = c.enable_bias
    modules += [
        _block_linear("decoder.layers.self_attn.k_proj", h, h, bias=bias, count=n),
        _block_linear("decoder.layers.self_attn.v_proj", h, h, bias=bias, count=n),
        _block_linear("decoder.layers.self_attn.q_proj", h, h, bias=bias, count=n),
        _block_linear("decoder.layers.self_attn.out_proj", h, h, bias=bias, count=n),
        *norm("decoder.layers.self_attn_layer_norm", n),
        _block_linear("decoder.layers.fc1", h, f, bias=bias, count=n),
        _block_linear("decoder.layers.fc2", f, h, bias=bias, count=n),
        *norm("decoder.layers.final_layer_norm", n),
    ]
    if head:
        modules.append(_lm_head("lm_head", e, c.vocab_size, tied=c.tie_word_embeddings))
    return modules, TransformerShape(n, h, c.num_attention_heads, c.vocab_size, **_dropout_of(c), intermediate_size=f,
                                     mlp_saved_tensors=saved_tensors(c.activation_function, gated=False))


def phi(c: PhiConfig, head: bool) -> tuple[Modules, TransformerShape]:
    """Attention and MLP side by side behind one LayerNorm, which both read (its output is saved once)."""
    h, i, n = c.hidden_size, c.intermediate_size, c.num_hidden_layers
    d = h // c.num_attention_heads
    kv = c.kv_heads * d
    modules = [
        _embedding("embed_tokens", c.vocab_size, h),
        *_self_attention(h, h, kv, "dense", bias=True, output_bias=True, count=n),
    ]
    if c.qk_layernorm:
        modules += [_norm("layers.self_attn.q_layernorm", d, count=n), _norm("layers.self_attn.k_layernorm", d, count=n)]
    modules += [
        _block_linear("layers.mlp.fc1", h, i, bias=True, count=n),
        _block_linear("layers.mlp.fc2", i, h, bias=True, count=n),
        _norm("layers.input_layernorm", h, count=n),
        _norm("final_layernorm", h),
    ]
    if head:
        modules.append(_lm_head("lm_head", h, c.vocab_size, tied=c.tie_word_embeddings, bias=True))
    return modules, TransformerShape(n, h, c.num_attention_heads, c.vocab_size, **_dropout_of(c), intermediate_size=i,
                                     mlp_saved_tensors=saved_tensors(c.hidden_act, gated=False), norms_per_layer=1)
