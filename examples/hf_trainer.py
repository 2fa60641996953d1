"""Train a tiny GPT-2 with the Hugging Face Trainer on zero's engine (ZeroTrainer), at stage 3 on 2 ranks.

    OMP_NUM_THREADS=1 .venv/bin/torchrun --standalone --nproc_per_node 2 examples/hf_trainer.py

The Trainer code is the usual one with two changes: `ZeroTrainer` instead of `Trainer`, and
`zero_config=` (examples/hf_trainer_config.json: "auto" everywhere the Trainer fills it in). The model
is built from a config with random weights inside `zero_init(...)`, so each rank only ever holds its
partitions (a pretrained model loads the same way: `AutoModelForCausalLM.from_pretrained(name)` inside the
block). The data is made here: counting sequences of token ids, which the model learns to continue.
Rank 0 prints the Trainer's log (loss, grad_norm, learning_rate), the evaluation loss, a continuation made
by `generate` on every rank (stage 3 needs `synced_gpus=True`), and checks that the saved model,
loaded with `from_pretrained`, generates the same. Under a minute on 2 CPU cores.
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, TrainingArguments
from zero_core.integrations.transformers import ZeroTrainer, zero_init

VOCAB, SEQ = 64, 24


class Counting(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Sequences start, start+1, start+2, ... (mod VOCAB) from a random start: predictable after the first token."""

    def __init__(self, count: int, seed: int) -> None:
        starts = torch.randint(0, VOCAB, (count, 1), generator=torch.Generator().manual_seed(seed))
        self.ids = (starts + torch.arange(SEQ)) % VOCAB

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zero-config", default=str(Path(__file__).with_name("hf_trainer_config.json")))
    parser.add_argument("--output-dir", default=os.path.join(tempfile.gettempdir(), "zero-hf-trainer"))
    parser.add_argument("--steps", type=int, default=60)
    return parser.parse_args()


def main() -> None:
    options = parse_args()
    args = TrainingArguments(output_dir=options.output_dir, per_device_train_batch_size=8, gradient_accumulation_steps=2,
                             learning_rate=3e-3, warmup_steps=4, max_steps=options.steps, logging_steps=10,
                             save_steps=20, save_total_limit=1, eval_strategy="steps", eval_steps=20,
                             use_cpu=not torch.cuda.is_available(), report_to=[], disable_tqdm=True)
    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=4, bos_token_id=0,
                        eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    with zero_init(options.zero_config, args, config):  # stage 3: each rank keeps its partitions only
        model = GPT2LMHeadModel(config)
    trainer = ZeroTrainer(model=model, args=args, zero_config=options.zero_config,
                          train_dataset=Counting(512, seed=1), eval_dataset=Counting(64, seed=2))
    trainer.train()
    metrics = trainer.evaluate()  # on every rank, as every call that runs the model at stage 3

    # Every rank runs generate: at stage 3 each forward gathers the weights from all ranks, and synced_gpus
    # keeps a rank that has finished running forwards until all have.
    prompt = torch.arange(5, 13, device=args.device).unsqueeze(0)  # 5, 6, ..., 12: the model should go on with 13, 14, ...
    trainer.model.eval()
    with torch.no_grad():
        generated = trainer.model.generate(input_ids=prompt, max_new_tokens=8, do_sample=False, synced_gpus=True)
    trainer.save_model(os.path.join(options.output_dir, "final"))
    if trainer.is_world_process_zero():
        print(f"eval loss {metrics['eval_loss']:.4f}\nprompt    {prompt[0].tolist()}\n"
              f"generated {generated[0, 8:].tolist()}")
        loaded = AutoModelForCausalLM.from_pretrained(os.path.join(options.output_dir, "final")).eval()
        with torch.no_grad():
            again = loaded.generate(input_ids=prompt.to(loaded.device), max_new_tokens=8, do_sample=False)
        print(f"the saved model, loaded with from_pretrained on one process, generates the same: "
              f"{torch.equal(again.cpu(), generated.cpu())}")
    # torch's rule for every process group: destroy it before the process ends. A gloo rank that leaves
    # without this can abort at exit ("terminate called without an active exception").
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
