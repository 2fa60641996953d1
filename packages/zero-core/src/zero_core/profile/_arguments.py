"""`zero profile`'s arguments, beside its body (_cli.py).

A module of its own because building the parser must import no torch, and _cli.py's imports do.
"""
from __future__ import annotations

import argparse


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    """`zero profile`'s description and flags."""
    parser.description = (
        "Launch NPROC local ranks, build MODEL from its Hugging Face config with random weights (nothing is "
        "downloaded), train STEPS steps at each stage with the engine's memory tracking on, and print per phase "
        "(after init, forward, backward, step) and per category the measured memory beside zero-estimate's, the "
        "error, and the cause of every gap above 5%. With --dry-run, trace the same engine on fake tensors in this "
        "process instead, for any model size and rank count, and say whether each peak fits --device-memory. "
        "docs/profile.md")
    parser.add_argument("--model", required=True, metavar="PRESET_OR_CONFIG",
                        help="a preset (pythia-tiny, llama-tiny, ...; with --dry-run also full-size ones: pythia-6.9b, "
                             "llama-3-70b, ...: `zero estimate --help` lists them) or a config.json (or its folder)")
    parser.add_argument("--ds-config", metavar="DS.json", help="the DeepSpeed ds_config (default: bf16 AdamW)")
    parser.add_argument("--nproc", type=int, default=2, help="local ranks (default 2)")
    parser.add_argument("--stages", metavar="S,S", help="ZeRO stages to run, e.g. 2,3 (default: the config's)")
    parser.add_argument("--memory-efficient-linear", choices=("true", "false", "both"),
                        help="stage 3: the flag's value, or both runs (default: the config's)")
    parser.add_argument("--lora-rank", type=int, metavar="R", help="freeze the model, train LoRA adapters of rank R")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="checkpoint every layer (Hugging Face's activation_checkpointing_enable, non-reentrant)")
    parser.add_argument("--attention", choices=("sdpa", "flash", "eager"), default="sdpa",
                        help="the model's attention (transformers' attn_implementation): sdpa (default, as in "
                             "transformers: a fused kernel where the device has one), flash (FlashAttention-2, CUDA "
                             "only) or eager (keeps the s x s probabilities)")
    parser.add_argument("--micro-batch", type=int, metavar="B", help="default: the config's micro-batch, or 1")
    parser.add_argument("--seq-len", type=int, default=128, metavar="S", help="tokens per sample (default 128)")
    parser.add_argument("--steps", type=int, default=3, metavar="K", help="training steps per stage (default 3)")
    parser.add_argument("--timeout", type=float, default=900.0, metavar="SECONDS",
                        help="stop the ranks after this long (default 900)")
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    parser.add_argument("--dry-run", action="store_true",
                        help="trace the engine on fake tensors in this process instead of launching ranks: any "
                             "model size and --nproc up to 65536, no memory used (docs/profile.md, \"Dry runs\")")
    parser.add_argument("--device", choices=("cuda", "cpu"),
                        help="--dry-run: the device each rank stands for (default cuda)")
    parser.add_argument("--device-memory", type=float, metavar="GIB",
                        help="--dry-run: one device's memory in GiB (default 80 for cuda, this host's for cpu)")
