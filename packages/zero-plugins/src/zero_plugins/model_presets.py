"""Well-known models, as the architecture keys of their published config.json files: one list for
`zero estimate --preset` and `zero profile --model` (which builds the causal language models among them).

Each entry copies the keys that decide the parameter count from the config.json of the
Hugging Face repository named in the comment; keys left out have transformers' defaults.
"""
from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # EleutherAI/pythia-6.9b
    "pythia-6.9b": {
        "model_type": "gpt_neox",
        "architectures": ["GPTNeoXForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 16384,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "max_position_embeddings": 2048,
        "rotary_pct": 0.25,
        "tie_word_embeddings": False,
        "use_parallel_residual": True,
        "vocab_size": 50432,
    },
    # meta-llama/Llama-2-7b-hf
    "llama-2-7b": {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 32,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "vocab_size": 32000,
    },
    # meta-llama/Llama-2-70b-hf: grouped-query attention, 8 key/value heads
    "llama-2-70b": {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_attention_heads": 64,
        "num_hidden_layers": 80,
        "num_key_value_heads": 8,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "vocab_size": 32000,
    },
    # mistralai/Mistral-7B-v0.1: grouped-query attention, 8 key/value heads
    "mistral-7b": {
        "model_type": "mistral",
        "architectures": ["MistralForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
        "vocab_size": 32000,
    },
    # google-t5/t5-3b (the model of DeepSpeed's estimator examples: 2851M params)
    "t5-3b": {
        "model_type": "t5",
        "architectures": ["T5WithLMHeadModel"],
        "d_ff": 16384,
        "d_kv": 128,
        "d_model": 1024,
        "num_heads": 32,
        "num_layers": 24,
        "relative_attention_num_buckets": 32,
        "vocab_size": 32128,
    },
    # openai-community/gpt2-xl
    "gpt2-xl": {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_embd": 1600,
        "n_head": 25,
        "n_layer": 48,
        "n_positions": 1024,
        "vocab_size": 50257,
    },
    # google-bert/bert-large-uncased
    "bert-large": {
        "model_type": "bert",
        "architectures": ["BertForMaskedLM"],
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_attention_heads": 16,
        "num_hidden_layers": 24,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "vocab_size": 30522,
    },
    # EleutherAI/pythia-1.4b
    "pythia-1.4b": {
        "model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "hidden_size": 2048,
        "intermediate_size": 8192, "num_attention_heads": 16, "num_hidden_layers": 24, "max_position_embeddings": 2048,
        "rotary_pct": 0.25, "tie_word_embeddings": False, "use_parallel_residual": True, "vocab_size": 50304,
    },
    # EleutherAI/pythia-12b
    "pythia-12b": {
        "model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "hidden_size": 5120,
        "intermediate_size": 20480, "num_attention_heads": 40, "num_hidden_layers": 36, "max_position_embeddings": 2048,
        "rotary_pct": 0.25, "tie_word_embeddings": False, "use_parallel_residual": True, "vocab_size": 50688,
    },
    # EleutherAI/gpt-neox-20b
    "gpt-neox-20b": {
        "model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "hidden_size": 6144,
        "intermediate_size": 24576, "num_attention_heads": 64, "num_hidden_layers": 44, "max_position_embeddings": 2048,
        "rotary_pct": 0.25, "tie_word_embeddings": False, "use_parallel_residual": True, "vocab_size": 50432,
    },
    # meta-llama/Llama-2-13b-hf
    "llama-2-13b": {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 5120, "intermediate_size": 13824,
        "num_attention_heads": 40, "num_hidden_layers": 40, "num_key_value_heads": 40, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "vocab_size": 32000,
    },
    # meta-llama/Meta-Llama-3-8B: grouped-query attention, 8 key/value heads
    "llama-3-8b": {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "max_position_embeddings": 8192,
        "rope_theta": 500000.0, "tie_word_embeddings": False, "vocab_size": 128256,
    },
    # meta-llama/Meta-Llama-3-70B
    "llama-3-70b": {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672,
        "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8, "max_position_embeddings": 8192,
        "rope_theta": 500000.0, "tie_word_embeddings": False, "vocab_size": 128256,
    },
    # Qwen/Qwen2-1.5B: 2 key/value heads, tied embeddings
    "qwen2-1.5b": {
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 1536, "intermediate_size": 8960,
        "num_attention_heads": 12, "num_hidden_layers": 28, "num_key_value_heads": 2, "max_position_embeddings": 131072,
        "tie_word_embeddings": True, "vocab_size": 151936,
    },
    # Qwen/Qwen2-7B
    "qwen2-7b": {
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944,
        "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "max_position_embeddings": 131072,
        "tie_word_embeddings": False, "vocab_size": 152064,
    },
    # facebook/opt-6.7b: the LM head is the embedding (tied)
    "opt-6.7b": {
        "model_type": "opt", "architectures": ["OPTForCausalLM"], "hidden_size": 4096, "ffn_dim": 16384,
        "num_attention_heads": 32, "num_hidden_layers": 32, "max_position_embeddings": 2048,
        "word_embed_proj_dim": 4096, "vocab_size": 50272,
    },
    # facebook/opt-13b
    "opt-13b": {
        "model_type": "opt", "architectures": ["OPTForCausalLM"], "hidden_size": 5120, "ffn_dim": 20480,
        "num_attention_heads": 40, "num_hidden_layers": 40, "max_position_embeddings": 2048,
        "word_embed_proj_dim": 5120, "vocab_size": 50272,
    },
}


def causal_lm_presets() -> list[str]:
    """The presets `zero profile` can build: causal language models (not T5's encoder-decoder or BERT)."""
    return [name for name, config in PRESETS.items()
            if any(arch.endswith("ForCausalLM") or arch == "GPT2LMHeadModel" for arch in config.get("architectures", []))]
