"""What TRL's trainers ask of the engine: one without an optimizer, an empty param group, and refused internals.

TRL's `prepare_deepspeed` builds its reference model this way: `deepspeed.initialize(model=..., config=...)` with
no optimizer and no optimizer block, at stage 3 (or stage 0 below it), then `eval()`. On 2 ranks, stages 0, 2 and 3:
- its forward in eval mode gives plain torch's outputs exactly, in fp32, in bf16, and for a model with every
  parameter frozen (a model with nothing to train is refused only where there is an optimizer);
- it holds no master copy, optimizer state or gradient buffer (every parameter is kept as a frozen one; in bf16 an
  engine that trains keeps an fp32 master);
- `backward` and `step` are refused with one error naming the missing optimizer.
The Hugging Face Trainer passes an empty param group (the no-decay group when only LoRA adapters train): at stage 3
it trains like plain torch.
TRL's unwrap_model_for_generation reaches DeepSpeed's `engine.optimizer.parameter_offload` (with `hasattr`): it is
one error naming it and the TRL setting that avoids it.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

from multirank import run_ranks

WORLD_SIZE = 2
STAGES = (0, 2, 3)
# what only training needs: a forward-only engine holds none of it, as DeepSpeed's inference engine
HELD_FOR_TRAINING = ("optim.master", "optim.state", "grad.partition", "grad.bucket", "grad.full")


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def _inputs() -> torch.Tensor:
    return torch.randn(3, 4, generator=torch.Generator().manual_seed(7))


def _forward_only(rank: int, world_size: int) -> dict[str, Any]:
    import zero_core
    from zero_core import EngineMisuse
    from zero_plugins import ZeroError

    found: dict[str, Any] = {}
    for stage in STAGES:
        engine, _, _, _ = zero_core.initialize(model=_model(), config={
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}})
        engine.eval()
        with torch.no_grad():
            found[f"outputs{stage}"] = engine(_inputs())
        for name, model, bf16 in (("bf16", _model(), True), ("frozen", _model().requires_grad_(False), False)):
            other, _, _, _ = zero_core.initialize(model=model, config={
                "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": bf16}, "zero_optimization": {"stage": stage}})
            with torch.no_grad():
                found[f"{name}{stage}"] = other(_inputs().to(other.compute_dtype))
            found[f"{name}-held{stage}"] = {category: other.ledger.current(category) for category in HELD_FOR_TRAINING}
            other.destroy()
        loss = engine(_inputs()).sum()
        refusals = []
        for call in (lambda: engine.backward(loss), engine.step):
            with pytest.raises(EngineMisuse) as caught:
                call()
            refusals.append(str(caught.value))
        with pytest.raises(ZeroError) as caught:
            hasattr(engine.optimizer, "parameter_offload")  # as TRL's remove_hooks asks
        refusals.append(str(caught.value))
        found[f"refusals{stage}"] = refusals
        engine.destroy()
    model = _model()
    engine, _, _, _ = zero_core.initialize(
        model=model, model_parameters=[{"params": list(model.parameters())}, {"params": [], "weight_decay": 0.0}],
        config={"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
                "gradient_clipping": 0.0, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}})
    engine.backward(engine(_inputs()[rank:rank + 1]).sum())
    engine.step()
    found["trained"] = engine.module_state_dict()
    return found


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return run_ranks(_forward_only, WORLD_SIZE, timeout=120)


@pytest.mark.parametrize("stage", STAGES)
def test_forward_without_an_optimizer_is_plain_torchs(ranks: list[dict[str, Any]], stage: int) -> None:
    with torch.no_grad():
        want = _model()(_inputs())
    for found in ranks:
        assert torch.equal(found[f"outputs{stage}"], want)


@pytest.mark.parametrize("stage", STAGES)
def test_in_bf16_and_frozen_it_runs_forward_and_holds_nothing_for_training(ranks: list[dict[str, Any]],
                                                                           stage: int) -> None:
    with torch.no_grad():
        want = {"bf16": _model().bfloat16()(_inputs().bfloat16()), "frozen": _model()(_inputs())}
    for found in ranks:
        for name, outputs in want.items():
            assert torch.equal(found[f"{name}{stage}"], outputs), name
            assert found[f"{name}-held{stage}"] == dict.fromkeys(HELD_FOR_TRAINING, 0), name


@pytest.mark.parametrize("stage", STAGES)
def test_backward_and_step_without_an_optimizer_and_parameter_offload_are_refused(ranks: list[dict[str, Any]], stage: int) -> None:
    why = ("on an engine built without an optimizer (initialize got no optimizer= and the config has no optimizer "
           "block): as DeepSpeed's, it only runs forward; pass optimizer= or add an optimizer block to train it")
    offload = ("engine.optimizer.parameter_offload (DeepSpeed's stage-3 hook owner, which TRL's "
               "unwrap_model_for_generation reaches to take the hooks off for generation) has no counterpart in zero: "
               "set ds3_gather_for_generation=False in the TRL config, and generation gathers each module as it runs")
    assert ranks[0][f"refusals{stage}"] == [f"engine.backward() {why}", f"engine.step() {why}", offload]


def test_an_empty_param_group_at_stage_3_trains_like_plain_torch(ranks: list[dict[str, Any]]) -> None:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    (model(_inputs()[:WORLD_SIZE]).sum() / WORLD_SIZE).backward()
    optimizer.step()
    for name, value in model.state_dict().items():
        torch.testing.assert_close(ranks[0]["trained"][name], value, rtol=1e-6, atol=1e-7, msg=name)
