"""Optional: counts from config.json equal transformers' own models built from the same config on meta.

Skips where transformers (and torch) are not installed, as in the zero-estimate tox envs.
"""
from __future__ import annotations

import pytest
from zero_estimate import ZeroSettings, from_hf_config, from_module
from zero_estimate._formula import Q
from zero_estimate._partitions import optimizer_shards, param_shards

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

THRESHOLD = 100  # small, so the tiny configs have params on both sides of it

CONFIGS = {
    "gpt_neox": {"hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 4, "num_hidden_layers": 3},
    "gpt_neox-tied-no-bias": {
        "model_type": "gpt_neox",
        "hidden_size": 64,
        "intermediate_size": 256,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "tie_word_embeddings": True,
        "attention_bias": False,
    },
    "llama-gqa": {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 176,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "num_hidden_layers": 3,
    },
    "llama-biases-head-dim": {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 176,
        "num_attention_heads": 8,
        "num_hidden_layers": 2,
        "attention_bias": True,
        "mlp_bias": True,
        "head_dim": 16,
        "tie_word_embeddings": True,
    },
    "mistral": {"hidden_size": 64, "intermediate_size": 176, "num_attention_heads": 8, "num_hidden_layers": 2},
    "gpt2": {"n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 128},
    "gpt2-untied-cross-attention": {
        "model_type": "gpt2",
        "n_embd": 64,
        "n_layer": 2,
        "n_head": 4,
        "n_positions": 128,
        "n_inner": 100,
        "tie_word_embeddings": False,
        "add_cross_attention": True,
    },
    "t5": {"d_model": 64, "d_kv": 16, "d_ff": 128, "num_layers": 2, "num_decoder_layers": 3, "num_heads": 4},
    "t5-gated": {
        "model_type": "t5",
        "d_model": 64,
        "d_kv": 16,
        "d_ff": 128,
        "num_layers": 2,
        "num_heads": 4,
        "feed_forward_proj": "gated-gelu",
    },
    "qwen2": {"hidden_size": 64, "intermediate_size": 176, "num_attention_heads": 8, "num_key_value_heads": 2,
              "num_hidden_layers": 2, "tie_word_embeddings": True},
    "qwen2-untied": {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                     "num_key_value_heads": 4, "num_hidden_layers": 3, "tie_word_embeddings": False},
    "opt": {"hidden_size": 64, "ffn_dim": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
            "word_embed_proj_dim": 64, "max_position_embeddings": 128},
    "opt-projected-no-bias": {"model_type": "opt", "hidden_size": 64, "ffn_dim": 128, "num_attention_heads": 4,
                              "num_hidden_layers": 2, "word_embed_proj_dim": 32, "enable_bias": False,
                              "max_position_embeddings": 128},
    "phi": {"hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2},
    "phi-tied": {"model_type": "phi", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                 "num_hidden_layers": 2, "tie_word_embeddings": True},
    "phi-gqa-qk-norm": {"model_type": "phi", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "num_hidden_layers": 2, "qk_layernorm": True},
    "bert": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128},
    "bert-untied-decoder": {
        "model_type": "bert",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "tie_word_embeddings": False,
        "is_decoder": True,
        "add_cross_attention": True,
    },
}
HEAD_CLASSES = {
    "gpt_neox": "AutoModelForCausalLM",
    "llama": "AutoModelForCausalLM",
    "mistral": "AutoModelForCausalLM",
    "gpt2": "AutoModelForCausalLM",
    "qwen2": "AutoModelForCausalLM",
    "opt": "AutoModelForCausalLM",
    "phi": "AutoModelForCausalLM",
    "t5": "T5ForConditionalGeneration",
    "bert": "BertForMaskedLM",
}


def _config(case: str) -> dict:
    config = dict(CONFIGS[case])
    config.setdefault("model_type", case)
    config.setdefault("vocab_size", 1000)
    if config["model_type"] == "gpt2":  # keep GPT-2's special tokens inside the small vocabulary
        config.update(bos_token_id=0, eos_token_id=0)
    return config


def _built(config: dict, head: bool):
    hf_config = transformers.AutoConfig.for_model(**config)
    name = HEAD_CLASSES[config["model_type"]] if head else "AutoModel"
    cls = getattr(transformers, name)
    with torch.device("meta"):
        return cls.from_config(hf_config) if name.startswith("Auto") else cls(hf_config)


def _counts(model) -> tuple[int, int, int, int]:
    """Total, largest module (DeepSpeed's way), persistent params and the linear weights autograd keeps as a
    view (nn.Linear's; GPT-2's Conv1D multiplies by the parameter itself, which is never held), from the model."""
    params = list(model.parameters())
    linear = sum(
        m.weight.numel()
        for m in model.modules()
        if isinstance(m, torch.nn.Linear) and m.weight.numel() > THRESHOLD
    )
    return (
        sum(p.numel() for p in params),
        max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules()),
        sum(p.numel() for p in params if p.numel() <= THRESHOLD),
        linear,
    )


@pytest.mark.parametrize("head", [True, False], ids=["with-head", "bare"])
@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_config_counts_equal_transformers_model_on_meta(case, head):
    config = _config(case)
    model = _built(config, head)
    spec = from_hf_config(config, head=head)
    persistent, linear = spec.persistent_params(THRESHOLD), spec.linear_weight_params(THRESHOLD)
    ours = (spec.total_params, spec.largest_layer_params, persistent, linear)
    theirs = _counts(model)
    if config["model_type"] == "t5" and head and config.get("tie_word_embeddings") is False:
        # transformers 5 always ties T5's lm_head; the v1.1 checkpoints (tie_word_embeddings false)
        # and transformers 4 keep it separate, and so do we.
        assert model.lm_head.weight is model.shared.weight
        theirs = (theirs[0] + config["vocab_size"] * config["d_model"], *theirs[1:])
    assert ours == theirs
    assert from_module(model).total_params == _counts(model)[0]


def test_a_live_hugging_face_model_gets_its_transformer_shape_for_activations():
    model = _built(_config("llama-gqa"), head=True)
    shape = from_module(model).shape
    assert (shape.num_layers, shape.hidden_size, shape.num_heads, shape.vocab_size) == (3, 64, 8, 1000)


@pytest.mark.parametrize("head", [True, False], ids=["with-head", "bare"])
@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_config_modules_come_in_the_order_the_model_registers_its_params(case, head):
    """The engine cuts reduce buckets in parameter order, so the offload lines need it to be exact."""
    config = _config(case)
    model = _built(config, head)
    spec = from_hf_config(config, head=head)
    ours = [shape for m in spec.instances() for shape in m.trainable + m.frozen]
    theirs = [tuple(p.shape) for p in model.parameters()]
    untied_t5 = config["model_type"] == "t5" and head and config.get("tie_word_embeddings") is False
    if untied_t5:  # transformers 5 ties it anyway (see above); ours is the checkpoint's own lm_head, last
        theirs.append((config["vocab_size"], config["d_model"]))
    assert ours == theirs
    if untied_t5:
        return
    live = from_module(model)
    for stage in (2, 3):
        zero = ZeroSettings(stage=stage, reduce_bucket_size=5000, stage3_param_persistence_threshold=THRESHOLD)
        counts = (Q.var("T", spec.trainable_params), Q.var("N", 4))
        assert optimizer_shards(spec, zero, 4, *counts).sizes == optimizer_shards(live, zero, 4, *counts).sizes
        units = (Q.var("P", spec.total_params), Q.var("N", 4))
        assert param_shards(spec, zero, 4, *units).sizes == param_shards(live, zero, 4, *units).sizes
