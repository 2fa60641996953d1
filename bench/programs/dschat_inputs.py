"""What DeepSpeed-Chat's step-1 (SFT) and step-2 (reward model) trainers need to run here, made locally: a tiny
OPT and its tokenizer saved with save_pretrained, and prompt/chosen/rejected json data; nothing downloaded.

OPT, because the client is written for it: step 1 reads `model.model` (OPT's and Llama's decoder, not GPT-NeoX's),
and step 2's defaults (`--num_padding_at_beginning 1`, `--lora_module_name decoder.layers.`) are OPT's.

DeepSpeed-Chat itself is never part of this repository: the user's checkout is found through ZERO_DEEPSPEED_CHAT
(its applications/DeepSpeed-Chat folder), and each run gets a copy of its `dschat` package and the two trainers'
main.py, unchanged, next to the data: the client reads `local/jsonfile` data from <checkout>/data/, so the data
goes into the copy, never into the user's checkout. Used by tests/integration/test_dschat_under_zero_launch.py and
the programs' latency bench.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

CHECKOUT_VARIABLE = "ZERO_DEEPSPEED_CHAT"
GIT_URL = "https://github.com/deepspeedai/DeepSpeedExamples"
HOW_TO_GET = (f"set {CHECKOUT_VARIABLE} to the applications/DeepSpeed-Chat folder of a clone of {GIT_URL} "
              f"(git clone {GIT_URL}; export {CHECKOUT_VARIABLE}=$PWD/DeepSpeedExamples/applications/DeepSpeed-Chat)")
STEP1 = Path("training/step1_supervised_finetuning/main.py")
STEP2 = Path("training/step2_reward_model_finetuning/main.py")
# The harness's sitecustomize (the client's own incompatibilities with transformers 5, for both runs).
HARNESS_SITE = Path(__file__).resolve().parent / "dschat_site"
EOS = "<|endoftext|>"
WORDS = ("the cat dog sat ran on a mat log red blue big small fast slow tree house car bird sings "
         "reads writes green old new happy sad").split()
VOCAB_SIZE = 352  # room for every word whole: the byte alphabet, the end-of-text token and the merges
MAX_SEQ_LEN = 24
TRAIN_ROWS = 32
EVAL_ROWS = 16
STEPS = 4


class CheckoutError(ValueError):
    """ZERO_DEEPSPEED_CHAT names a folder that is not DeepSpeed-Chat; the message says what is missing."""


def find_checkout() -> Path | None:
    """The DeepSpeed-Chat folder ZERO_DEEPSPEED_CHAT names, or None where the variable is unset."""
    value = os.environ.get(CHECKOUT_VARIABLE)
    if not value:
        return None
    checkout = Path(value)
    for needed in (STEP1, STEP2, Path("dschat/utils/utils.py")):
        if not (checkout / needed).is_file():
            raise CheckoutError(f"{CHECKOUT_VARIABLE}={value} has no {needed}: {HOW_TO_GET}")
    return checkout


def stage_checkout(checkout: Path, folder: Path) -> Path:
    """A copy of the client's `dschat` package and its two trainers under `folder`, with the local data in its
    data/ folder (where `local/jsonfile` looks); returns the copy's DeepSpeed-Chat folder."""
    copy = folder / "DeepSpeed-Chat"
    shutil.copytree(checkout / "dschat", copy / "dschat", ignore=shutil.ignore_patterns("__pycache__"))
    for trainer in (STEP1, STEP2):
        (copy / trainer).parent.mkdir(parents=True)
        shutil.copy2(checkout / trainer, copy / trainer)
    write_data(copy / "data")
    return copy


def _sentence(rng: random.Random, length: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(length))


def write_data(folder: Path) -> None:
    """train.json and eval.json: rows of prompt, chosen and rejected, as `local/jsonfile` reads them."""
    rng = random.Random(0)
    folder.mkdir(parents=True)
    for name, rows in (("train.json", TRAIN_ROWS), ("eval.json", EVAL_ROWS)):
        data = [{"prompt": f"Human: {_sentence(rng, 4)} Assistant:", "chosen": _sentence(rng, 5),
                 "rejected": _sentence(rng, 3)} for _ in range(rows)]
        (folder / name).write_text(json.dumps(data))


def write_model(folder: Path) -> Path:
    """A tiny OPT (random weights, seed 0) and its tokenizer, saved as a model folder.

    The tokenizer is OPT's kind (GPT2Tokenizer: byte-level BPE, each sequence starting with the end-of-text
    token), its merges learnt here from WORDS; the folder holds vocab.json and merges.txt as OPT's does (the
    client's save calls tokenizer.save_vocabulary, which copies them)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import GPT2Tokenizer, OPTConfig, OPTForCausalLM

    rng = random.Random(1)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator([f" Human: {_sentence(rng, 8)} Assistant:" for _ in range(200)],
                            trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[EOS], show_progress=False,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    folder.mkdir(parents=True)
    bpe.model.save(str(folder))  # vocab.json, merges.txt
    vocabulary = json.loads((folder / "vocab.json").read_text())
    merges = [tuple(line.split()) for line in (folder / "merges.txt").read_text().splitlines()[1:] if line]
    tokenizer = GPT2Tokenizer(vocab=vocabulary, merges=merges, add_bos_token=True)
    torch.manual_seed(0)
    vocab_size = 8 * -(-len(tokenizer) // 8)  # the client resizes to a multiple of 8: the size it keeps
    model = OPTForCausalLM(OPTConfig(vocab_size=vocab_size, hidden_size=32, word_embed_proj_dim=32,
                                     num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
                                     max_position_embeddings=64, pad_token_id=0, bos_token_id=0, eos_token_id=0))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@dataclass(frozen=True)
class Run:
    """One trainer's command line: which step, ZeRO stage, and the client's options that vary."""
    step: int
    stage: int
    lora: bool = False
    gradient_checkpointing: bool = False
    offload: bool = False

    @property
    def name(self) -> str:
        extras = [flag for flag, on in (("lora", self.lora), ("gc", self.gradient_checkpointing),
                                        ("offload", self.offload)) if on]
        return "-".join([f"step{self.step}", f"stage{self.stage}", *extras])


def program_arguments(run: Run, copy: Path, model: Path, work: Path) -> list[str]:
    """The trainer's path and its arguments, as DeepSpeed-Chat's own training scripts give them."""
    if run.step == 1:  # one epoch of STEPS steps: 16 rows, 2 per rank, 2 ranks; it prints each step's loss
        schedule = ["--data_split", "1,1,0", "--num_train_epochs", "1", "--print_loss"]
    else:  # step 2 prints only each epoch's mean loss: STEPS epochs of one step (4 rows), its loss in fp32
        schedule = ["--data_split", "3,1,4", "--num_train_epochs", str(STEPS), "--compute_fp32_loss"]
    arguments = [str(copy / (STEP1 if run.step == 1 else STEP2)), "--model_name_or_path", str(model),
                 "--data_path", "local/jsonfile", *schedule, "--data_output_path", str(work / "data_files"),
                 "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2",
                 "--max_seq_len", str(MAX_SEQ_LEN), "--learning_rate", "1e-3", "--lr_scheduler_type", "linear",
                 "--num_warmup_steps", "1", "--seed", "1234", "--dtype", "bf16", "--zero_stage", str(run.stage)]
    if run.lora:
        arguments += ["--lora_dim", "4", "--only_optimize_lora",
                      "--lora_learning_rate", "1e-3"]
    if run.gradient_checkpointing:
        arguments.append("--gradient_checkpointing")
    if run.offload:
        arguments.append("--offload")
    return arguments


def program_environment(copy: Path) -> dict[str, str]:
    """The variables both runs add: the harness's sitecustomize and the copy's `dschat` on PYTHONPATH."""
    entries = [str(HARNESS_SITE), str(copy), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(entries), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


_STEP1_LOSS = re.compile(r"^Epoch: (\d+), Step: (\d+), Rank: (\d+), loss = (?:tensor\()?([-0-9.e+]+)", re.MULTILINE)
_STEP2_SCORES = re.compile(r"^chosen_last_scores \(higher is better\) : ([-0-9.e+]+), "
                           r"rejected_last_scores \(lower is better\) : ([-0-9.e+]+)", re.MULTILINE)
_STEP2_LOSS = re.compile(r"^Epoch \d+/\d+ with loss ([-0-9.e+]+)", re.MULTILINE)
_PERPLEXITY = re.compile(r"^ppl: ([-0-9.e+inf]+), loss: ([-0-9.e+]+)", re.MULTILINE)
_LATENCY = re.compile(r"Latency: ([0-9.]+)s, TFLOPs")


def step1_losses(output: str) -> dict[tuple[int, int], float]:
    """Step 1's `--print_loss` lines: (step, rank) -> loss."""
    return {(int(step), int(rank)): float(loss) for _, step, rank, loss in _STEP1_LOSS.findall(output)}


def step1_eval_losses(output: str) -> list[float]:
    """Step 1's evaluation losses, before and after the epoch."""
    return [float(loss) for _, loss in _PERPLEXITY.findall(output)]


def step2_scores(output: str) -> list[tuple[float, float]]:
    """Step 2's evaluations, before training and after each epoch: (chosen score, rejected score)."""
    return [(float(chosen), float(rejected)) for chosen, rejected in _STEP2_SCORES.findall(output)]


def step2_losses(output: str) -> list[float]:
    """Step 2's mean training loss of each epoch (rank 0's): each step's, with one step an epoch."""
    return [float(loss) for loss in _STEP2_LOSS.findall(output)]


def step_latencies(output: str) -> list[float]:
    """The seconds per step that step 1's print_throughput reports on rank 0."""
    return [float(seconds) for seconds in _LATENCY.findall(output)]
