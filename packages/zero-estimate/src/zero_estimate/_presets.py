"""Well-known models, as the architecture keys of their published config.json files.

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
}
