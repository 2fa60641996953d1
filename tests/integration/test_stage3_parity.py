"""Parity: stage 3 on 2 and 4 gloo ranks trains like one plain-torch process.

The model has every case stage 3 must handle: an embedding tied to the output head (one
Parameter registered by two modules), a parameter used by another module (`borrow` reads
`proj.weight` outside `proj`'s forward), LoRA adapters on frozen base linears, LayerNorms
and biases small enough to stay whole (persistence threshold), a block called twice in one
forward, and, in one case, activation checkpointing of the blocks, and stepping each unit within backward
(`step_in_backward`). Prefetch and live-parameter limits are set small so that they act. Each
case trains 10 steps on the same global batch of 8 sequences; the fp32 cases must match
plain torch (losses, and the full weights consolidated by `engine.module_state_dict()`)
within fp32 tolerance. fp16 with dynamic loss scaling (starting high, so steps overflow
and are skipped) must skip the same steps as stage 2 and end with the same weights, and
track fp32 plain torch within fp16 tolerance.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from engine_helpers import LoRALinear
from parity_helpers import CLIP, GLOBAL_BATCH, LR, STEPS, split_batch_config, train_split, train_whole

SEQ = 8
VOCAB = 64
HIDDEN = 32


class Borrower(torch.nn.Module):
    """Uses another module's weight: the weight's unit is gathered here, outside its own module's forward."""

    def __init__(self, owner: torch.nn.Linear) -> None:
        super().__init__()
        self._owner = [owner]  # a plain list: not a submodule

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self._owner[0].weight) * 0.5


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(HIDDEN)
        self.up = LoRALinear.new(HIDDEN, 2 * HIDDEN)
        self.down = torch.nn.Linear(2 * HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Toy(torch.nn.Module):
    def __init__(self, checkpointing: bool = False) -> None:
        super().__init__()
        self.checkpointing = checkpointing
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN)
        self.borrow = Borrower(self.proj)
        self.norm = torch.nn.LayerNorm(HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for block in (*self.blocks, self.blocks[0]):  # block 0 runs twice
            # activation checkpointing re-runs the block's forward inside backward
            h = checkpoint(block, h, use_reentrant=False) if self.checkpointing else block(h)
        h = self.proj(h) + self.borrow(h)
        logits = self.head(self.norm(h))
        return F.cross_entropy(logits.float().reshape(-1, VOCAB), ids.roll(-1, 1).reshape(-1))


def make_model(checkpointing: bool = False) -> Toy:
    torch.manual_seed(1234)
    return Toy(checkpointing)


def make_data() -> torch.Tensor:
    return torch.randint(0, VOCAB, (STEPS, GLOBAL_BATCH, SEQ), generator=torch.Generator().manual_seed(5))


CASES: dict[str, dict[str, Any]] = {
    "stage3": {},
    "stage3-accum2-clip": {"accum": 2, "clip": CLIP},
    "stage3-no-prefetch-no-overlap": {"prefetch": 0, "overlap": False, "efficient": False},
    "stage3-checkpointing": {"checkpointing": True},
    # each unit steps as its gradient is reduced (the tied embedding and the block run twice step once, last)
    "stage3-step-in-backward": {"step_in_backward": True},
    "stage3-step-in-backward-checkpointing": {"step_in_backward": True, "checkpointing": True},
    "stage3-fp16": {"fp16": True},
    "stage2-fp16": {"fp16": True, "stage": 2},
}


def ds_config(case: dict[str, Any], world_size: int) -> dict[str, Any]:
    return {
        **split_batch_config(case, world_size),
        "fp16": {"enabled": case.get("fp16", False), "loss_scale": 0, "initial_scale_power": 20, "hysteresis": 1},
        "zero_optimization": {
            "stage": case.get("stage", 3),
            "overlap_comm": case.get("overlap", True),
            "reduce_bucket_size": 3000,
            "stage3_param_persistence_threshold": 100,
            "stage3_prefetch_bucket_size": case.get("prefetch", 2500),
            "stage3_max_live_parameters": 7000,
            "memory_efficient_linear": case.get("efficient", True),
            "step_in_backward": case.get("step_in_backward", False),
        },
    }


def train_reference(clip: float, skip: int = 0) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Plain torch; the first `skip` steps only measure the loss (fp16's skipped overflow steps)."""
    model = make_model()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR, weight_decay=0.0)
    losses = train_whole(model, model, optimizer, make_data(), clip, skip)
    return losses, {name: value.clone() for name, value in model.state_dict().items()}


def _train_all_cases(rank: int, world_size: int) -> dict[str, Any]:
    import warnings

    import zero_core

    data = make_data()
    results = {}
    for name, case in CASES.items():
        engine, _, _, _ = zero_core.initialize(model=make_model(case.get("checkpointing", False)),
                                               config=ds_config(case, world_size))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            losses = list(train_split(engine, engine, data, rank, world_size))
        state = engine.module_state_dict() if case.get("stage", 3) == 3 else {
            k: v.detach().clone() for k, v in engine.module.state_dict().items()}
        results[name] = {
            "losses": losses,
            "state": {k: v.float() for k, v in state.items()},
            "skipped": engine.skipped_steps,
            "held_warnings": [str(w.message) for w in caught if "still alive after release" in str(w.message)],
            "prefetched": getattr(getattr(engine, "coordinator", None), "prefetched", None),
            "peak_live": getattr(getattr(engine, "coordinator", None), "peak_live_numel", None),
        }
        engine.destroy()
    return results


@pytest.fixture(scope="module")
def reference() -> dict[float, tuple[list[float], dict[str, torch.Tensor]]]:
    return {clip: train_reference(clip) for clip in {case.get("clip", 0.0) for case in CASES.values()}}


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def trained(request) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    from multirank import run_ranks

    return run_ranks(_train_all_cases, request.param, timeout=400)


@pytest.mark.parametrize("name", [n for n in CASES if not CASES[n].get("fp16")])
def test_fp32_matches_plain_torch(trained, reference, name: str) -> None:  # type: ignore[no-untyped-def]
    ref_losses, ref_state = reference[CASES[name].get("clip", 0.0)]
    result = trained[0][name]
    assert set(result["state"]) == set(ref_state), "module_state_dict has the keys of state_dict, tied ones too"
    torch.testing.assert_close(torch.tensor(result["losses"]), torch.tensor(ref_losses), rtol=1e-5, atol=1e-6)
    for key, ref in ref_state.items():
        torch.testing.assert_close(result["state"][key], ref, rtol=1e-4, atol=1e-5, msg=key)
    assert all(rank_result[name]["state"] == {} for rank_result in trained[1:]), "consolidated on rank 0 only"
    assert result["peak_live"] <= 7000, "stage3_max_live_parameters is a cap on gathered elements"
    if CASES[name].get("prefetch", 1):
        assert result["prefetched"] > 0, "the traced order drives prefetching from the second step on"
    else:
        assert result["prefetched"] == 0


def test_frozen_lora_bases_do_not_move(trained) -> None:  # type: ignore[no-untyped-def]
    start = make_model().state_dict()
    state = trained[0]["stage3"]["state"]
    for key in (k for k in start if ".base." in k):
        assert torch.equal(state[key], start[key]), key
    assert not torch.equal(state["blocks.0.up.lora_a.weight"], start["blocks.0.up.lora_a.weight"])


def test_stock_linear_warns_about_held_weights_and_still_trains(trained) -> None:  # type: ignore[no-untyped-def]
    warned = trained[0]["stage3-no-prefetch-no-overlap"]["held_warnings"]
    assert len(warned) == 1 and "memory_efficient_linear: true" in warned[0]
    assert trained[0]["stage3"]["held_warnings"] == []


def test_fp16_loss_scaling_matches_stage2(trained) -> None:  # type: ignore[no-untyped-def]
    stage3, stage2 = trained[0]["stage3-fp16"], trained[0]["stage2-fp16"]
    assert 0 < stage3["skipped"] == stage2["skipped"] < STEPS, "overflowing steps are skipped as at stage 2"
    torch.testing.assert_close(torch.tensor(stage3["losses"]), torch.tensor(stage2["losses"]), rtol=1e-3, atol=1e-3)
    for key, value in stage2["state"].items():
        torch.testing.assert_close(stage3["state"][key], value, rtol=1e-3, atol=1e-3, msg=key)
    # the scale starts high and halves on each overflow, so the skipped steps are the first ones
    ref_losses, _ = train_reference(0.0, skip=stage3["skipped"])
    torch.testing.assert_close(torch.tensor(stage3["losses"]), torch.tensor(ref_losses), rtol=1e-2, atol=0.0)
