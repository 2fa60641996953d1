"""Train a scaled-down Pythia (GPT-NeoX) with zero and a DeepSpeed ds_config, then show the memory ledger.

    torchrun --standalone --nproc_per_node 2 examples/train.py --config examples/ds_config.json

This is DeepSpeed's training loop unchanged except for the import: `zero_core.initialize`,
`engine(batch)`, `engine.backward(loss)`, `engine.step()`. The model is built from a
transformers config with random weights (nothing is downloaded) and trained on random
tokens. Rank 0 prints the loss per step and, at the end, the ledger of rank 0's memory by
category, which `zero estimate` predicts for the same model and config.
"""
from __future__ import annotations

import argparse
import os

import torch
import zero_core
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="a DeepSpeed ds_config JSON file")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab-size", type=int, default=4096)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(
        GPTNeoXConfig(
            vocab_size=args.vocab_size, hidden_size=args.hidden_size, num_hidden_layers=args.layers,
            num_attention_heads=max(1, args.hidden_size // 64), intermediate_size=4 * args.hidden_size,
            max_position_embeddings=max(2048, args.seq_len),
        )
    )
    engine, _, _, _ = zero_core.initialize(model=model, model_parameters=model.parameters(), config=args.config)
    rank = int(os.environ.get("RANK", 0))
    tokens = torch.Generator().manual_seed(1 + rank)
    micro_steps = args.steps * engine.gradient_accumulation_steps()
    for micro_step in range(micro_steps):
        batch = torch.randint(0, args.vocab_size, (engine.train_micro_batch_size_per_gpu(), args.seq_len), generator=tokens)
        loss = engine(input_ids=batch, labels=batch).loss
        engine.backward(loss)
        engine.step()
        if rank == 0 and (micro_step + 1) % engine.gradient_accumulation_steps() == 0:
            print(f"step {engine.global_steps:3d}  loss {loss.item():.4f}  lr {engine.get_lr()[0]:.2e}", flush=True)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        stage = engine.zero_optimization_stage()
        world = torch.distributed.get_world_size()
        print(f"\n{params / 1e6:.2f}M parameters, ZeRO stage {stage}, {world} ranks: rank 0 memory ledger")
        print(engine.memory_report())
    engine.destroy()
    torch.distributed.destroy_process_group()  # torch's rule: before the process ends, on every rank


if __name__ == "__main__":
    main()
