"""CPU offload side by side with DeepSpeed 0.19.8's (skipped where it is not installed): the same losses.

Two gloo ranks train the same small GPT-NeoX with the same ds_config, once with
zero_core.initialize and once with deepspeed.initialize: optimizer state offloaded to the
CPU at stages 1, 2 and 3, and at stage 3 the parameters too. Both step with torch's AdamW
on the CPU (`torch_adam: true`, so DeepSpeed needs no CPU-Adam build), with gradient
clipping and 2 accumulation micro-batches, in fp32. Every step's loss agrees to fp32
rounding, and at stages 1-2 the final weights too.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

from hf_models import SMALL_GPT_NEOX, small_gpt_neox, train_causal_lm

STEPS = 4
VOCAB = SMALL_GPT_NEOX["vocab_size"]
OPTIMIZER = {"offload_optimizer": {"device": "cpu"}}
CASES = {
    "stage1-optimizer": (1, OPTIMIZER),
    "stage2-optimizer": (2, OPTIMIZER),
    "stage3-optimizer": (3, OPTIMIZER),
    "stage3-optimizer-params": (3, {**OPTIMIZER, "offload_param": {"device": "cpu"}}),
}


def ds_config(stage: int, offload: dict[str, Any]) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 2,
        "gradient_clipping": 0.1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01, "torch_adam": True}},
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 4000, "allgather_bucket_size": 4000,
                              "stage3_param_persistence_threshold": 100, **offload},
    }


def _train_both(rank: int, world_size: int) -> dict[tuple[str, str], dict[str, Any]]:
    from deepspeed_peer import import_deepspeed

    deepspeed = import_deepspeed()
    import zero_core

    data = torch.randint(0, VOCAB, (STEPS, 2, world_size, 2, 16), generator=torch.Generator().manual_seed(8))
    results: dict[tuple[str, str], dict[str, Any]] = {}
    for case, (stage, offload) in CASES.items():
        for name, initialize in (("zero", zero_core.initialize), ("deepspeed", deepspeed.initialize)):
            model = small_gpt_neox(seed=5)
            engine, _, _, _ = initialize(model=model, model_parameters=model.parameters(),
                                         config=ds_config(stage, offload))
            losses = train_causal_lm(engine, data, rank)
            params = {} if stage == 3 else {n: p.detach().clone() for n, p in engine.module.named_parameters()}
            results[name, case] = {"losses": losses, "params": params}
            engine.destroy()
    return results


def test_same_losses_as_deepspeed_with_cpu_offload(run_ranks) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("deepspeed")
    for rank_result in run_ranks(_train_both, 2, timeout=400, env={"DS_ACCELERATOR": "cpu"}):
        for case in CASES:
            ours, theirs = rank_result["zero", case], rank_result["deepspeed", case]
            torch.testing.assert_close(torch.tensor(ours["losses"]), torch.tensor(theirs["losses"]),
                                       rtol=1e-5, atol=1e-6, msg=f"{case} losses")
            for name, value in ours["params"].items():
                torch.testing.assert_close(value, theirs["params"][name], rtol=1e-4, atol=1e-5, msg=f"{case} {name}")
