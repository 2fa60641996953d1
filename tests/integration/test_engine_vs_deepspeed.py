"""Side by side with DeepSpeed 0.19.8 (skipped where it is not installed): same losses, same weights.

Two gloo ranks train the same small GPT-NeoX with the same ds_config at stages 0, 1 and 2,
once with zero_core.initialize and once with deepspeed.initialize (torch's AdamW in both,
via `torch_adam`), with gradient clipping and 2 accumulation micro-batches. In fp32 every
step's loss and the final weights agree to fp32 rounding.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

from hf_models import SMALL_GPT_NEOX, small_gpt_neox, train_causal_lm

STEPS = 5
VOCAB = SMALL_GPT_NEOX["vocab_size"]


def make_model() -> torch.nn.Module:
    return small_gpt_neox(seed=5)


def ds_config(stage: int) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 2,
        "gradient_clipping": 0.1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01, "torch_adam": True}},
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 4000, "allgather_bucket_size": 4000},
    }


def _train_both(rank: int, world_size: int) -> dict[str, Any]:
    from deepspeed_peer import import_deepspeed

    deepspeed = import_deepspeed()
    import zero_core

    data = torch.randint(0, VOCAB, (STEPS, 2, world_size, 2, 16), generator=torch.Generator().manual_seed(8))
    results: dict[str, Any] = {}
    for stage in (0, 1, 2):
        for name, initialize in (("zero", zero_core.initialize), ("deepspeed", deepspeed.initialize)):
            model = make_model()
            engine, _, _, _ = initialize(model=model, model_parameters=model.parameters(), config=ds_config(stage))
            losses = train_causal_lm(engine, data, rank)
            results[name, stage] = {"losses": losses,
                                    "params": {n: p.detach().clone() for n, p in engine.module.named_parameters()}}
            engine.destroy()
    return results


def test_same_losses_and_weights_as_deepspeed(run_ranks) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("deepspeed")
    for rank_result in run_ranks(_train_both, 2, timeout=300, env={"DS_ACCELERATOR": "cpu"}):
        for stage in (0, 1, 2):
            ours, theirs = rank_result["zero", stage], rank_result["deepspeed", stage]
            torch.testing.assert_close(torch.tensor(ours["losses"]), torch.tensor(theirs["losses"]),
                                       rtol=1e-5, atol=1e-6, msg=f"stage {stage} losses")
            for name, value in ours["params"].items():
                torch.testing.assert_close(value, theirs["params"][name], rtol=1e-4, atol=1e-5,
                                           msg=f"stage {stage} {name}")
