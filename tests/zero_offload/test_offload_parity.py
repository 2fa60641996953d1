"""Parity: CPU offload trains exactly like the same run without offload, step by step.

Two gloo ranks train a small model with every kind of parameter offload must handle (an
embedding tied to the output head, a frozen base linear with LoRA adapters, LayerNorms small
enough to stay whole at stage 3) from the same ds_config, once without offload and once with
`offload_optimizer` (stages 1-3), `offload_param` (stage 3) or both. The optimizer is the
config's AdamW, so with the optimizer state offloaded it is zero-offload's CPUAdam. Its fused C++ op
agrees with torch's kernel within 1e-6 per step (test_cpu_optim_native.py); over four steps of
training those last-bit differences grow through the model, and would hide a bug of offload's
own. So the ranks step CPUAdam with torch's fused kernel (ZERO_CPU_OPTIMIZER_KERNEL=torch), the
run without offload asks for the same kernel (`"fused": true`), and any difference left is
offload's. Losses and the final full weights must agree: fp32 within a relative 1e-6, bf16 within
the bf16 tests' tolerance. Gradient
clipping and accumulation are on in some cases, and one case steps in sub-groups of 300
elements (`sub_group_size`).
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

from tied_lora import HIDDEN, SEQ, VOCAB, TiedLoRA
from multirank import run_ranks

STEPS = 4
OPTIMIZER = {"offload_optimizer": {"device": "cpu"}}
PARAMS = {"offload_param": {"device": "cpu"}}

CASES: dict[str, dict[str, Any]] = {
    "stage1-optimizer-fp32": {"stage": 1, "offload": OPTIMIZER},
    "stage2-optimizer-fp32-accum": {"stage": 2, "offload": OPTIMIZER, "accum": 2},
    "stage3-optimizer-fp32-subgroups": {"stage": 3, "offload": OPTIMIZER, "sub_group_size": 300},
    "stage3-params-fp32": {"stage": 3, "offload": PARAMS},
    "stage3-both-fp32-accum": {"stage": 3, "offload": {**OPTIMIZER, **PARAMS}, "accum": 2},
    "stage1-optimizer-bf16-accum": {"stage": 1, "offload": OPTIMIZER, "bf16": True, "accum": 2},
    "stage2-optimizer-bf16": {"stage": 2, "offload": OPTIMIZER, "bf16": True},
    "stage3-both-bf16": {"stage": 3, "offload": {**OPTIMIZER, **PARAMS}, "bf16": True},
}


def ds_config(case: dict[str, Any], offload: bool) -> dict[str, Any]:
    accum = case.get("accum", 1)
    kernel = {} if offload else {"fused": True}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": accum, "gradient_clipping": 0.1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01, **kernel}},
        "zero_optimization": {"stage": case["stage"], "stage3_param_persistence_threshold": HIDDEN,
                              "reduce_bucket_size": 3000, "sub_group_size": case.get("sub_group_size", 10**9),
                              **(case["offload"] if offload else {})},
    }
    if case.get("bf16"):
        config["bf16"] = {"enabled": True}
    return config


def train_steps(engine: Any, case: dict[str, Any], rank: int, world_size: int) -> list[float]:
    """STEPS optimizer steps (of the case's accumulation) on the same tokens every time; this rank's losses."""
    data = torch.randint(0, VOCAB, (STEPS, case.get("accum", 1), world_size, 2, SEQ),
                         generator=torch.Generator().manual_seed(3))
    losses = []
    for step in data:
        for micro in step:
            loss = engine(micro[rank])
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
    return losses


def _train(rank: int, world_size: int, case: dict[str, Any], offload: bool) -> dict[str, Any]:
    import zero_core

    torch.manual_seed(7)
    model = TiedLoRA()
    engine, _, _, _ = zero_core.initialize(model=model, config=ds_config(case, offload))
    losses = train_steps(engine, case, rank, world_size)
    state = {name: value.float() for name, value in engine.module_state_dict().items()}
    optimizer_type = type(engine.optimizer.optimizer).__name__
    engine.destroy()
    return {"losses": losses, "state": state, "optimizer": optimizer_type}


def _both(rank: int, world_size: int) -> dict[str, dict[str, Any]]:
    return {name: {"plain": _train(rank, world_size, case, offload=False),
                   "offload": _train(rank, world_size, case, offload=True)} for name, case in CASES.items()}


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any]]:
    return run_ranks(_both, 2, timeout=300, env={"ZERO_CPU_OPTIMIZER_KERNEL": "torch"})[0]


@pytest.mark.parametrize("name", CASES)
def test_offload_matches_the_run_without_offload(results, name: str) -> None:  # type: ignore[no-untyped-def]
    plain, offload = results[name]["plain"], results[name]["offload"]
    tolerance = {"rtol": 2e-2, "atol": 2e-3} if CASES[name].get("bf16") else {"rtol": 1e-6, "atol": 1e-7}
    torch.testing.assert_close(torch.tensor(offload["losses"]), torch.tensor(plain["losses"]), **tolerance)
    assert set(offload["state"]) == set(plain["state"])
    for key, value in plain["state"].items():
        torch.testing.assert_close(offload["state"][key], value, **tolerance, msg=key)


@pytest.mark.parametrize("name", CASES)
def test_offloaded_optimizer_state_is_stepped_by_cpu_adam(results, name: str) -> None:  # type: ignore[no-untyped-def]
    expected = "CPUAdam" if "offload_optimizer" in CASES[name]["offload"] else "AdamW"
    assert results[name]["offload"]["optimizer"] == expected
    assert results[name]["plain"]["optimizer"] == "AdamW"
