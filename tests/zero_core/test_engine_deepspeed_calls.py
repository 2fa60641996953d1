"""The DeepSpeed engine calls integrations make beyond the loop (engine/_deepspeed_calls.py), at stages 0-3 on 2 ranks.

- `set_gradient_accumulation_boundary(True)` forces a step after a number of micro-batches that is not a multiple of
  `gradient_accumulation_steps` (the epoch's end): that backward reduces and that step applies, with the loss still
  divided by gradient_accumulation_steps (DeepSpeed's rule), so with SGD the weights are exactly a plain-torch
  reference's. The override stays until set again (DeepSpeed's); None returns to counting. Changing it between
  backward and step is refused.
- accelerate's loop (the boundary set before every backward, `step()` only where it is True) accumulates the
  held-off backwards and steps like plain torch; a `step()` for a backward the boundary has moved past is refused.
- `_zero3_consolidated_16bit_state_dict()`: rank 0 gets module_state_dict's weights, tied ones one tensor; None on
  rank 1; `exclude_frozen_parameters` drops frozen names.
- `zero_gather_16bit_weights_on_model_save()` echoes the config; stage-3 parameters carry DeepSpeed's `ds_id` and
  sizes (`ds_numel`, what transformers reads); stages 0-2 set none (test_stage3_ds_attributes.py checks the rest).
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

from multirank import run_ranks
from tied_lora import TiedFrozen

WORLD_SIZE = 2
STAGES = (0, 1, 2, 3)
LR = 0.1



def _config(stage: int, **zero: Any) -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
            "optimizer": {"type": "SGD", "params": {"lr": LR}}, "gradient_clipping": 0.0,
            "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0, **zero}}


def _batches() -> torch.Tensor:
    """[micro][rank]: three micro-batches of two samples per rank, the same on every rank's generator."""
    generator = torch.Generator().manual_seed(7)
    return torch.randn(3, WORLD_SIZE, 2, 4, generator=generator)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _reference(steps: tuple[list[int], ...] = ([0, 1], [2])) -> dict[str, torch.Tensor]:
    """Plain torch: a step on micro-batches 0-1 (each loss / 2), then a step on micro-batch 2 alone (loss / 2)."""
    model = _model()
    data = _batches()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for micros in steps:
        for micro in micros:
            for rank in range(WORLD_SIZE):
                (model(data[micro][rank]).pow(2).mean() / 2 / WORLD_SIZE).backward()
        optimizer.step()
        optimizer.zero_grad()
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def _boundary(rank: int, world_size: int) -> dict[int, dict[str, Any]]:
    import zero_core
    from zero_core import EngineMisuse

    found: dict[int, dict[str, Any]] = {}
    data = _batches()
    for stage in STAGES:
        engine, _, _, _ = zero_core.initialize(model=_model(), config=_config(stage))
        applied, boundaries = [], []
        for micro in range(3):
            if micro == 2:
                engine.set_gradient_accumulation_boundary(True)  # the epoch ends after an odd micro-batch
            boundaries.append(engine.is_gradient_accumulation_boundary())
            engine.backward(engine(data[micro][rank]).pow(2).mean())
            engine.step()
            applied.append(engine.was_step_applied())
        state = engine.module_state_dict()
        sticky = engine.is_gradient_accumulation_boundary()
        engine.set_gradient_accumulation_boundary(None)
        counting = engine.is_gradient_accumulation_boundary()  # micro-step 4 of gradient_accumulation_steps 2
        engine.backward(engine(data[0][rank]).pow(2).mean())
        refused = ""
        try:
            engine.set_gradient_accumulation_boundary(False)
        except EngineMisuse as error:
            refused = str(error)
        engine.set_gradient_accumulation_boundary(True)  # what backward saw: allowed
        engine.step()
        found[stage] = {"applied": applied, "boundaries": boundaries, "global_steps": engine.global_steps,
                        "state": state, "sticky": sticky, "counting": counting, "refused": refused,
                        "applied_after": engine.was_step_applied()}
        engine.destroy()
        found[stage]["accelerate"] = _accelerate_loop(stage, rank)
    return found


@pytest.fixture(scope="module")
def boundary() -> list[dict[int, dict[str, Any]]]:
    return run_ranks(_boundary, WORLD_SIZE, timeout=120)


@pytest.mark.parametrize("stage", STAGES)
def test_a_forced_boundary_reduces_and_steps_like_plain_torch(boundary, stage: int) -> None:  # type: ignore[no-untyped-def]
    result = boundary[0][stage]
    assert result["boundaries"] == [False, True, True]
    assert result["applied"] == [False, True, True], "the forced boundary's step applies"
    assert result["global_steps"] == 3
    reference = _reference()
    for name, value in result["state"].items():
        torch.testing.assert_close(value, reference[name], rtol=1e-6, atol=1e-7, msg=name)


@pytest.mark.parametrize("stage", STAGES)
def test_the_override_stays_until_set_and_cannot_change_a_pending_backward(
        boundary, stage: int) -> None:  # type: ignore[no-untyped-def]
    result = boundary[0][stage]
    assert result["sticky"] is True, "DeepSpeed's override stays set"
    assert result["counting"] is True, "None counts micro-batches again: micro-step 4 closes a pair"
    assert result["refused"] == ("engine.set_gradient_accumulation_boundary() between backward() and step() changes "
                                 "the boundary that backward already reduced for; set it before backward")
    assert result["applied_after"] is True


def _accelerate_loop(stage: int, rank: int) -> dict[str, Any]:
    """accelerate's DeepSpeedEngineWrapper.backward: the boundary set before each backward, step only at True."""
    import zero_core
    from zero_core import EngineMisuse

    data = _batches()
    engine, _, _, _ = zero_core.initialize(model=_model(), config=_config(stage))
    for micro, boundary in ((0, False), (1, True)):
        engine.set_gradient_accumulation_boundary(boundary)
        engine.backward(engine(data[micro][rank]).pow(2).mean())
        if boundary:
            engine.step()
    applied, state = engine.was_step_applied(), engine.module_state_dict()
    engine.set_gradient_accumulation_boundary(False)
    engine.backward(engine(data[2][rank]).pow(2).mean())
    engine.set_gradient_accumulation_boundary(True)  # the held-off backward joins the accumulation
    refused = ""
    try:
        engine.step()  # its own step, after the boundary moved on: nothing of this micro-batch to step with
    except EngineMisuse as error:
        refused = str(error)
    found = {"applied": applied, "state": state, "global_steps": engine.global_steps, "refused": refused}
    engine.destroy()
    return found


@pytest.mark.parametrize("stage", STAGES)
def test_accelerates_loop_steps_only_at_the_boundary_like_plain_torch(
        boundary, stage: int) -> None:  # type: ignore[no-untyped-def]
    result = boundary[0][stage]["accelerate"]
    assert (result["applied"], result["global_steps"]) == (True, 1)
    reference = _reference(([0, 1],))
    for name, value in result["state"].items():
        torch.testing.assert_close(value, reference[name], rtol=1e-6, atol=1e-7, msg=name)
    assert result["refused"] == ("engine.step() without engine.backward(loss) since the last step: there are no "
                                 "gradients of this micro-batch to step with; call backward first")


def _consolidated(rank: int, world_size: int) -> dict[int, dict[str, Any]]:
    import zero_core

    found: dict[int, dict[str, Any]] = {}
    for stage in STAGES:
        torch.manual_seed(0)
        config = {**_config(stage, stage3_gather_16bit_weights_on_model_save=stage == 3), "bf16": {"enabled": True}}
        engine, _, _, _ = zero_core.initialize(model=TiedFrozen(6), config=config)
        engine.backward(engine(torch.randn(2, 6, dtype=torch.bfloat16)).float().pow(2).mean())
        engine.step()
        full = engine._zero3_consolidated_16bit_state_dict()
        trainable = engine._zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=True)
        reference = engine.module_state_dict()
        ids = [(hasattr(param, "ds_id"), getattr(param, "ds_numel", None)) for param in engine.module.parameters()]
        found[stage] = {
            "full": full, "trainable": None if trainable is None else sorted(trainable), "reference": reference,
            "tied": None if full is None else full["embed.weight"] is full["head.weight"],
            "gather_on_save": engine.zero_gather_16bit_weights_on_model_save(), "ds_ids": ids,
        }
        engine.destroy()
    return found


@pytest.fixture(scope="module")
def consolidated() -> list[dict[int, dict[str, Any]]]:
    return run_ranks(_consolidated, WORLD_SIZE, timeout=120)


@pytest.mark.parametrize("stage", STAGES)
def test_consolidated_state_dict_on_rank_0_with_tied_weights_shared(
        consolidated, stage: int) -> None:  # type: ignore[no-untyped-def]
    zero, one = consolidated[0][stage], consolidated[1][stage]
    assert one["full"] is None and one["trainable"] is None, "None on other ranks, as in DeepSpeed"
    assert list(zero["full"]) == list(zero["reference"]) == [
        "embed.weight", "frozen.weight", "frozen.bias", "head.weight"], "state_dict's keys and order"
    for name, value in zero["full"].items():
        assert value.dtype == torch.bfloat16 and value.device.type == "cpu", name
        assert torch.equal(value, zero["reference"][name]), name
    assert zero["tied"], "a tied weight is one tensor under both names"
    assert zero["trainable"] == ["embed.weight", "head.weight"]


@pytest.mark.parametrize("stage", STAGES)
def test_gather_on_save_echoes_the_config_and_stage_3_parameters_carry_ds_id_and_sizes(
        consolidated, stage: int) -> None:  # type: ignore[no-untyped-def]
    result = consolidated[0][stage]
    assert result["gather_on_save"] is (stage == 3)
    expected = [(True, 36), (True, 36), (True, 6)] if stage == 3 else [(False, None)] * 3  # tied: listed once
    assert result["ds_ids"] == expected
