"""Tiny Hugging Face models, built from a config with random weights, for the tests that train one.

Imported like engine_helpers.py (tests/ is on sys.path) by test modules that need torch;
transformers is imported only when a model is built.
"""
from __future__ import annotations

from typing import Any

import torch

# The 2-layer GPT-NeoX of the stage 0-2 parity tests (ours against plain torch and against DeepSpeed).
SMALL_GPT_NEOX = {"vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                  "intermediate_size": 64, "max_position_embeddings": 64}


def gpt_neox(seed: int, **config: Any) -> torch.nn.Module:
    """GPTNeoXForCausalLM(GPTNeoXConfig(**config)) with eager attention, its weights drawn after manual_seed(seed)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    hf_config = GPTNeoXConfig(**config, attn_implementation="eager")
    torch.manual_seed(seed)
    return GPTNeoXForCausalLM(hf_config)


def small_gpt_neox(seed: int) -> torch.nn.Module:
    """The SMALL_GPT_NEOX model."""
    return gpt_neox(seed, **SMALL_GPT_NEOX)


# A GPT-2 of the same size, with tied input and output embeddings (the DeepSpeed-script test).
TINY_GPT2 = {"vocab_size": 96, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}


def tiny_gpt2(seed: int) -> torch.nn.Module:
    """GPT2LMHeadModel(GPT2Config(**TINY_GPT2)) with eager attention and no dropout, its weights drawn after
    manual_seed(seed)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    hf_config = GPT2Config(**TINY_GPT2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
    torch.manual_seed(seed)
    return GPT2LMHeadModel(hf_config)


def train_causal_lm(engine: Any, data: torch.Tensor, rank: int) -> list[float]:
    """DeepSpeed's loop on a causal LM: `data[step][micro][rank]` are this rank's token ids; returns every loss."""
    losses = []
    for step in data:
        for micro in step:
            ids = micro[rank]
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
    return losses
