"""TRL's SFTTrainer and DPOTrainer, unchanged, under `zero launch` (docs/integrations.md, "TRL"; issue 34, item 3).

Each program is written as TRL's documentation shows users: a tiny GPT-NeoX from its config (random init), a
word-level tokenizer built in the program, a `datasets.Dataset.from_dict` made there, `SFTConfig`/`DPOConfig` with
`deepspeed="ds.json"` (its values left "auto" for the Trainer to fill), 2 CPU ranks on gloo, 3 optimizer steps of 2
micro-batches, a loss logged every step.
- SFT: stage 2 in fp32, stage 3 in bf16, and stage 3 with LoRA through peft (`peft_config=LoraConfig(...)`).
- DPO with a second model as `ref_model`: TRL builds it with `deepspeed.initialize(model=..., config=...)`, no
  optimizer, and calls eval(). At stage 3 (fp32) it is a stage-3 engine that only runs forward; below stage 3 TRL
  sets stage 0 for it (stage 2 in bf16 here).
Without DeepSpeed, each run's first step is checked against what it must be: DPO's first loss is ln 2 (the policy
and the reference model are the same weights, so every reward is 0), and SFT's first loss is the same with and
without LoRA (peft's B matrices start at 0), at stage 2 and 3. Where DeepSpeed 0.19.8 is installed, each program
also runs under plain torchrun on DeepSpeed (DS_ACCELERATOR=cpu) and the per-step losses agree: within
FP32_TOLERANCE in fp32 (measured: 0.0, the Trainer's torch AdamW steps on both) and BF16_TOLERANCE in bf16
(measured: up to 9.0e-5). What SFT's `trainer.save_model()` writes (the adapter alone with LoRA) agrees too:
the same names and dtypes, fp32 within FP32_TOLERANCE (measured 5.4e-7 at stage 2, after the third update, which
no logged loss sees; 0.0 for LoRA at stage 3), bf16 within one bf16 step (measured 1.2e-3).
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from programs._launch_runs import (BF16_TOLERANCE, FP32_TOLERANCE, assert_close, needs_deepspeed, on_deepspeed, write,
                                   zero_launch)

pytest.importorskip("trl")
pytest.importorskip("peft")
load_file = pytest.importorskip("safetensors.torch").load_file
pytestmark = pytest.mark.timeout(240)

# what both programs share: the tokenizer, the model, the words, the run's settings
PRELUDE = '''
import argparse, json
import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

WORDS = "the a cat dog sat ran on under mat log big small red blue and then".split()


def tiny_tokenizer():
    vocab = {word: index for index, word in enumerate(["<pad>", "<eos>", "<unk>"] + WORDS)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>",
                                   unk_token="<unk>")


def tiny_model(tokenizer):
    torch.manual_seed(0)
    return GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=64, max_position_embeddings=32,
                                            pad_token_id=tokenizer.pad_token_id,
                                            eos_token_id=tokenizer.eos_token_id))


def sentences(count, length, seed):
    picks = torch.randint(0, len(WORDS), (count, length), generator=torch.Generator().manual_seed(seed)).tolist()
    return [" ".join(WORDS[i] for i in row) for row in picks]


# zero launch and DeepSpeed's launcher pass --local_rank; the run's settings come in one JSON file
parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser.add_argument("run")
run = json.loads(open(parser.parse_args().run).read())
settings = dict(output_dir=run["output_dir"], deepspeed=run["deepspeed"], bf16=run["bf16"], use_cpu=True,
                per_device_train_batch_size=2, gradient_accumulation_steps=2, learning_rate=1e-3, max_steps=3,
                logging_steps=1, save_strategy="no", report_to=[], seed=0)
tokenizer = tiny_tokenizer()
'''

SFT_PROGRAM = PRELUDE + '''
from trl import SFTConfig, SFTTrainer

peft_config = None
if run["lora"]:
    from peft import LoraConfig
    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["query_key_value"], task_type="CAUSAL_LM")
trainer = SFTTrainer(model=tiny_model(tokenizer), args=SFTConfig(max_length=16, **settings),
                     train_dataset=Dataset.from_dict({"text": sentences(32, 12, seed=7)}),
                     processing_class=tokenizer, peft_config=peft_config)
trainer.train()
trainer.save_model(run["output_dir"] + "/final")  # the adapter alone with LoRA
'''

DPO_PROGRAM = PRELUDE + '''
from trl import DPOConfig, DPOTrainer

pairs = Dataset.from_dict({"prompt": sentences(32, 6, seed=7),
                           "chosen": [" " + text for text in sentences(32, 6, seed=8)],
                           "rejected": [" " + text for text in sentences(32, 6, seed=9)]})
trainer = DPOTrainer(model=tiny_model(tokenizer), ref_model=tiny_model(tokenizer),
                     args=DPOConfig(max_length=24, **settings), train_dataset=pairs, processing_class=tokenizer)
trainer.train()
'''

# the losses the Trainer logged, one a step, as users read them after training
LOSSES = '''
if trainer.is_world_process_zero():
    with open(run["losses"], "w") as out:
        json.dump([entry["loss"] for entry in trainer.state.log_history if "loss" in entry], out)
'''
PROGRAMS = {"sft": SFT_PROGRAM + LOSSES, "dpo": DPO_PROGRAM + LOSSES}
# name -> (program, ZeRO stage, bf16, LoRA)
CASES = {
    "sft-stage2-fp32": ("sft", 2, False, False),
    "sft-stage3-bf16": ("sft", 3, True, False),
    "sft-stage3-lora-fp32": ("sft", 3, False, True),
    "dpo-stage3-fp32": ("dpo", 3, False, False),
    "dpo-stage2-bf16": ("dpo", 2, True, False),
}


def _ds_config(stage: int) -> dict[str, Any]:
    """The ds.json users write for the Trainer: what it fills in left "auto", no optimizer block (its AdamW)."""
    zero: dict[str, Any] = {"stage": stage}
    if stage == 3:
        zero.update({"reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                     "stage3_param_persistence_threshold": "auto", "stage3_gather_16bit_weights_on_model_save": True})
    return {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "gradient_clipping": "auto", "bf16": {"enabled": "auto"}, "zero_optimization": zero}


@dataclass(frozen=True)
class Outcome:
    losses: list[float]  # one a step
    saved: dict[str, torch.Tensor]  # what SFT's save_model wrote (the adapter alone with LoRA); none for DPO


Run = Callable[[str, str], Outcome]


def _runner(folder: Path, launch: Callable[..., None]) -> Run:
    def run(case: str, name: str) -> Outcome:
        program, stage, bf16, lora = CASES[case]
        script = write(folder, f"{program}.py", PROGRAMS[program])
        config = write(folder, f"ds{stage}.json", json.dumps(_ds_config(stage)))
        losses, output = folder / f"{name}-{case}.json", folder / f"{name}-{case}"
        settings = {"deepspeed": str(config), "output_dir": str(output), "losses": str(losses), "bf16": bf16,
                    "lora": lora}
        launch(script, str(write(folder, f"{name}-{case}-run.json", json.dumps(settings))))
        found: list[float] = json.loads(losses.read_text())
        assert len(found) == 3
        saved = {key: value for file in sorted(output.glob("final/*.safetensors")) for key, value in
                 load_file(file).items()}
        assert bool(saved) == (program == "sft")
        return Outcome(found, saved)

    return run


@pytest.fixture(scope="module")
def on_zero(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Each case's run under `zero launch`, once for every test of this module that reads it."""
    run = _runner(tmp_path_factory.mktemp("zero"), zero_launch)
    done: dict[str, Outcome] = {}

    def cached(case: str, name: str = "zero") -> Outcome:
        if case not in done:
            done[case] = run(case, name)
        return done[case]

    return cached


@pytest.mark.parametrize("case", ["dpo-stage3-fp32", "dpo-stage2-bf16"])
def test_dpos_first_loss_is_ln2_with_the_reference_model_on_zero(on_zero: Run, case: str) -> None:
    # the reference model (a forward-only engine) and the policy hold the same weights at step 1
    assert on_zero(case).losses[0] == pytest.approx(math.log(2), abs=1e-7)


def test_sfts_first_loss_is_the_same_with_lora_and_at_either_stage(on_zero: Run) -> None:
    assert on_zero("sft-stage3-lora-fp32").losses[0] == on_zero("sft-stage2-fp32").losses[0]


@needs_deepspeed
@pytest.mark.parametrize("case", CASES)
def test_trl_on_zero_matches_deepspeed(on_zero: Run, tmp_path: Path, case: str) -> None:
    zero = on_zero(case)
    deepspeed = _runner(tmp_path, on_deepspeed)(case, "deepspeed")
    tolerance = BF16_TOLERANCE if CASES[case][2] else FP32_TOLERANCE
    assert_close(zero.losses, deepspeed.losses, tolerance)
    assert zero.saved.keys() == deepspeed.saved.keys()
    # bf16 weights near 1 (the layer norms') are 2**-7 apart: allow one such step
    rtol = 2**-7 if CASES[case][2] else 0.0
    for key, value in zero.saved.items():
        assert value.dtype == deepspeed.saved[key].dtype
        torch.testing.assert_close(value.float(), deepspeed.saved[key].float(), rtol=rtol, atol=tolerance, msg=key)
