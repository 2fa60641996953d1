"""The programs bench/programs_latency.py times: each as a user writes it for DeepSpeed, run unchanged.

Every program builds a tiny GPT-NeoX from its config (random init, nothing downloaded), makes its data, and
writes to `--timing` (a path; each rank adds `.<rank>`) the wall and process CPU seconds of every optimizer step,
measured by the program around the step (a Trainer callback for the Trainers). Process CPU time is the user+sys
time of all the rank's threads (gloo's included): the host-side cost of a step, which other processes on the
machine do not inflate as they do wall time.
"""
from __future__ import annotations

# Shared by every program: the step clock and where it writes.
_CLOCK = '''
import argparse, cProfile, json, math, os, time
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, TrainerCallback

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser.add_argument("--timing", required=True)
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--stage", type=int, default=3)
parser.add_argument("--hidden", type=int, default=128)
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--seq", type=int, default=128)
parser.add_argument("--lora", action="store_true")
parser.add_argument("--checkpointing", action="store_true")
parser.add_argument("--profile", help="also write cProfile's statistics of the steps after the first 2 here")
args = parser.parse_args()
VOCAB = 512
STAGE = {"stage": args.stage, "stage3_param_persistence_threshold": 10000, "stage3_max_live_parameters": 30000000,
         "stage3_prefetch_bucket_size": 30000000, "reduce_bucket_size": 500000000}


class Clock:
    """Wall and process CPU seconds of each step, written per rank at the end."""

    def __init__(self):
        self.wall, self.cpu = [], []
        self.profile = cProfile.Profile() if args.profile else None

    def start(self):
        if self.profile and len(self.wall) >= 2:
            self.profile.enable()
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def stop(self):
        self.wall.append(time.perf_counter() - self._wall)
        self.cpu.append(time.process_time() - self._cpu)
        if self.profile:
            self.profile.disable()

    def write(self):
        rank = int(os.environ.get("RANK", "0"))
        with open(f"{args.timing}.{rank}", "w") as out:
            json.dump({"wall": self.wall, "cpu": self.cpu}, out)
        if self.profile:
            self.profile.dump_stats(f"{args.profile}.{rank}")


def tiny_gpt_neox():
    torch.manual_seed(0)
    return GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=VOCAB, hidden_size=args.hidden, num_hidden_layers=args.layers,
                                            num_attention_heads=4, intermediate_size=4 * args.hidden,
                                            max_position_embeddings=args.seq))


class Timed(TrainerCallback):
    """The clock around each optimizer step of a Trainer."""

    def on_step_begin(self, *_, **__):
        clock.start()

    def on_step_end(self, *_, **__):
        clock.stop()


clock = Clock()
'''

# DeepSpeed-Chat step 1's shape: its own LoRA layers on the decoder's linears (frozen base weights), gradient
# checkpointing, bf16, its ds_config's stage-3 values, `model.backward(loss)` / `model.step()`.
DSCHAT_LOOP = _CLOCK + '''
import deepspeed


class LoRALinear(torch.nn.Module):
    def __init__(self, linear, dim=8):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        rows, columns = self.weight.shape
        self.lora_right = torch.nn.Parameter(torch.zeros(columns, dim))
        self.lora_left = torch.nn.Parameter(torch.zeros(dim, rows))
        torch.nn.init.kaiming_uniform_(self.lora_right, a=math.sqrt(5))

    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight, self.bias) + (x @ self.lora_right) @ self.lora_left


deepspeed.init_distributed()
model = tiny_gpt_neox()
if args.lora:
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear) and ".layers." in f"{name}.{child_name}":
                setattr(module, child_name, LoRALinear(child))
    for name, param in model.named_parameters():
        param.requires_grad = "lora_" in name
if args.checkpointing:
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
config = {"train_micro_batch_size_per_gpu": 2, "train_batch_size": 4, "gradient_clipping": 1.0,
          "bf16": {"enabled": True}, "zero_optimization": STAGE}
model, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
generator = torch.Generator().manual_seed(7 + torch.distributed.get_rank())
for step in range(args.steps):
    ids = torch.randint(0, VOCAB, (2, args.seq), generator=generator)
    clock.start()
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    model.backward(loss)
    model.step()
    clock.stop()
clock.write()
'''

# The stock transformers.Trainer with `TrainingArguments(deepspeed=ds.json)`, a config of "auto" values.
TRAINER = _CLOCK + '''
from transformers import Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self):
        self.ids = torch.randint(0, VOCAB, (4 * args.steps, args.seq), generator=torch.Generator().manual_seed(7))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


config = {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto", "gradient_clipping": "auto",
          "bf16": {"enabled": "auto"}, "zero_optimization": {k: "auto" if "bucket" in k or "persistence" in k else v
                                                             for k, v in STAGE.items()}}
settings = TrainingArguments(output_dir=os.path.dirname(args.timing), deepspeed=config, bf16=True,
                             per_device_train_batch_size=2, max_steps=args.steps, learning_rate=1e-3,
                             logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                             gradient_checkpointing=args.checkpointing)
Trainer(model=tiny_gpt_neox(), args=settings, train_dataset=Tokens(), callbacks=[Timed()]).train()
clock.write()
'''

# accelerate's DeepSpeed plugin on a hand-written loop. Not `cpu=True`: with it accelerate ignores the plugin and
# wraps the model in DistributedDataParallel (accelerate.state: DeepSpeed is used only `if not cpu`).
ACCELERATE = _CLOCK + '''
from accelerate import Accelerator, DeepSpeedPlugin

model = tiny_gpt_neox()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, VOCAB, (4 * args.steps, args.seq), generator=torch.Generator().manual_seed(7))
config = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
          "zero_optimization": STAGE}
accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config), mixed_precision="bf16")
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=2)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
assert accelerator.distributed_type == "DEEPSPEED", accelerator.distributed_type
model.train()
for (batch,) in loader:
    clock.start()
    loss = model(input_ids=batch, labels=batch).loss
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    clock.stop()
clock.write()
'''

# TRL's SFTTrainer on text, with a word-level tokenizer built in the program.
TRL_SFT = _CLOCK + '''
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from trl import SFTConfig, SFTTrainer

words = [f"w{i}" for i in range(VOCAB - 2)]
vocabulary = {"<pad>": 0, "<eos>": 1, **{word: i + 2 for i, word in enumerate(words)}}
backend = Tokenizer(models.WordLevel(vocabulary, unk_token="<pad>"))
backend.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")
draw = torch.Generator().manual_seed(7)
texts = [" ".join(words[i] for i in torch.randint(0, len(words), (args.seq - 1,), generator=draw).tolist())
         for _ in range(4 * args.steps)]


config = {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto", "gradient_clipping": "auto",
          "bf16": {"enabled": "auto"}, "zero_optimization": STAGE}
settings = SFTConfig(output_dir=os.path.dirname(args.timing), deepspeed=config, bf16=True, max_length=args.seq,
                     per_device_train_batch_size=2, max_steps=args.steps, learning_rate=1e-3, logging_steps=1,
                     save_strategy="no", report_to=[], use_cpu=True, gradient_checkpointing=args.checkpointing)
SFTTrainer(model=tiny_gpt_neox(), args=settings, train_dataset=Dataset.from_dict({"text": texts}),
           processing_class=tokenizer, callbacks=[Timed()]).train()
clock.write()
'''

# name -> (program text, its options): the rows of the bench's table.
PROGRAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "dschat-lora-stage3": (DSCHAT_LOOP, ("--stage", "3", "--lora", "--checkpointing")),
    "dschat-full-stage3": (DSCHAT_LOOP, ("--stage", "3")),
    "dschat-full-stage2": (DSCHAT_LOOP, ("--stage", "2")),
    "hf-trainer-stage3": (TRAINER, ("--stage", "3")),
    "accelerate-stage3": (ACCELERATE, ("--stage", "3")),
    "trl-sft-stage3": (TRL_SFT, ("--stage", "3")),
}
