"""Local stand-ins for what programs written for the Hub download: a tokenizer, a model directory, text files.

Everything is built here from fixed words and a seed, so a program run with HF_HUB_OFFLINE=1 and
HF_DATASETS_OFFLINE=1 finds all it asks for on disk, and two runs see the same tokens and weights.
Used by tests/integration/test_run_clm_under_zero_launch.py and the programs' latency bench (both put this
folder on sys.path); transformers and tokenizers are imported only when a tokenizer or model is built.
"""
from __future__ import annotations

import random
from pathlib import Path

WORDS = ("the", "a", "model", "trains", "on", "two", "ranks", "and", "each", "step", "gathers", "weights",
         "from", "every", "partition", "while", "loss", "falls", "slowly", "fast", "data", "moves", "to", "host")
SPECIAL_TOKENS = ("<unk>", "<|endoftext|>")
# a GPT-NeoX small enough for 2 CPU ranks in seconds; its vocabulary is the tokenizer's
TINY_GPT_NEOX = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
                 "max_position_embeddings": 64, "attn_implementation": "eager"}


def write_text(path: Path, lines: int, seed: int) -> Path:
    """`lines` lines of 6 to 14 of WORDS each, drawn with random.Random(seed): a text file for `--train_file`."""
    draw = random.Random(seed)
    path.write_text("".join(" ".join(draw.choice(WORDS) for _ in range(draw.randint(6, 14))) + "\n"
                            for _ in range(lines)))
    return path


def save_tokenizer(folder: Path, model_max_length: int = 64) -> Path:
    """A word-level fast tokenizer over SPECIAL_TOKENS + WORDS (split on whitespace), saved with save_pretrained
    so that AutoTokenizer.from_pretrained(folder) loads it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocabulary = {token: index for index, token in enumerate((*SPECIAL_TOKENS, *WORDS))}
    core = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<|endoftext|>",
                                        bos_token="<|endoftext|>", model_max_length=model_max_length)
    tokenizer.save_pretrained(folder)
    return folder


def vocabulary_size() -> int:
    """The tokenizer's vocabulary size, which the model's embeddings match (no resizing in the program)."""
    return len(SPECIAL_TOKENS) + len(WORDS)


def save_gpt_neox(folder: Path, seed: int) -> Path:
    """TINY_GPT_NEOX with random weights drawn after torch.manual_seed(seed), saved with save_pretrained
    (config.json and model.safetensors) for `--model_name_or_path`; its config alone serves `--config_name`."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(vocab_size=vocabulary_size(), bos_token_id=1, eos_token_id=1, **TINY_GPT_NEOX)
    torch.manual_seed(seed)
    GPTNeoXForCausalLM(config).save_pretrained(folder)
    return folder
