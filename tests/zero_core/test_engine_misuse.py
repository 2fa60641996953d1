"""Misuse of the engine is one clear error, in a world of one: the call order, use after destroy, a model
initialize cannot train (nothing trainable, meta parameters, already wrapped)."""
from __future__ import annotations

from typing import Any

import pytest
import torch
import zero_core
from zero_core import EngineMisuse
from zero_plugins import ZeroError

pytestmark = pytest.mark.usefixtures("solo_process_group")


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _config(**overrides: Any) -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
            "zero_optimization": {"stage": 2}, **overrides}


def _loss(engine: Any) -> torch.Tensor:
    return engine(torch.randn(2, 6)).pow(2).mean()


def test_step_without_backward_is_refused() -> None:
    engine, _, _, _ = zero_core.initialize(model=_model(), config=_config())
    with pytest.raises(EngineMisuse, match=r"engine.step\(\) without engine.backward\(loss\) since the last step"):
        engine.step()
    engine.backward(_loss(engine))
    engine.step()
    with pytest.raises(EngineMisuse, match="without engine.backward"):
        engine.step()
    assert engine.global_steps == 1


def test_two_backwards_without_a_step_are_refused_unless_zero_grad_discards_the_first() -> None:
    engine, _, _, _ = zero_core.initialize(model=_model(), config=_config(gradient_accumulation_steps=2))
    engine.backward(_loss(engine))
    with pytest.raises(EngineMisuse, match=r"engine.backward\(\) twice without engine.step\(\) between"):
        engine.backward(_loss(engine))
    engine.zero_grad()  # the first micro-batch's gradients are discarded: a backward may follow
    engine.backward(_loss(engine))
    engine.step()
    engine.backward(_loss(engine))  # gradient accumulation: one backward and one step per micro-batch
    engine.step()
    assert engine.global_steps == 1 and engine.micro_steps == 2


def test_a_backward_that_raised_can_be_retried() -> None:
    engine, _, _, _ = zero_core.initialize(model=_model(), config=_config())
    handle = engine.module[0].weight.register_hook(lambda grad: (_ for _ in ()).throw(ValueError("boom")))
    with pytest.raises(ValueError, match="boom"):
        engine.backward(_loss(engine))
    handle.remove()
    engine.backward(_loss(engine))
    engine.step()
    assert engine.was_step_applied()


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_the_engine_refuses_use_after_destroy(stage: int) -> None:
    model = _model()
    engine, _, _, _ = zero_core.initialize(model=model, config=_config(zero_optimization={"stage": stage}))
    loss = _loss(engine)
    engine.destroy()
    for call, run in (("forward", lambda: engine(torch.randn(2, 6))), ("backward", lambda: engine.backward(loss)),
                      ("step", engine.step)):
        with pytest.raises(EngineMisuse, match=rf"engine.{call}\(\) after engine.destroy\(\)"):
            run()
    again, _, _, _ = zero_core.initialize(model=model, config=_config(zero_optimization={"stage": stage}))
    again.backward(_loss(again))  # after destroy the model may be wrapped again
    again.step()


def test_initialize_twice_on_one_model_is_refused() -> None:
    model = _model()
    zero_core.initialize(model=model, config=_config())
    with pytest.raises(ZeroError, match="this Sequential is already wrapped by a ZeroEngine"):
        zero_core.initialize(model=model, config=_config())


@pytest.mark.parametrize("stage", [0, 3])
def test_a_model_with_nothing_to_train_is_refused(stage: int) -> None:
    model = _model().requires_grad_(False)
    with pytest.raises(ZeroError, match="Sequential has no parameter with requires_grad=True"):
        zero_core.initialize(model=model, config=_config(zero_optimization={"stage": stage}))


def test_meta_parameters_name_init_and_to_empty() -> None:
    with torch.device("meta"):
        model = _model()
    with pytest.raises(ZeroError, match=r"4 parameter\(s\) of Sequential are on the meta device .* \(first: "
                                        r"0.weight\); build the model under zero_core.Init"):
        zero_core.initialize(model=model, config=_config())


def test_lr_kwargs_the_scheduler_does_not_take_are_refused_before_the_step() -> None:
    config = _config(scheduler={"type": "WarmupLR", "params": {"warmup_max_lr": 0.1, "warmup_num_steps": 4}})
    engine, _, _, _ = zero_core.initialize(model=_model(), config=config)
    engine.backward(_loss(engine))
    weights = [p.detach().clone() for p in engine.module.parameters()]
    with pytest.raises(ZeroError, match=r"engine.step\(lr_kwargs=\['increment'\]\): WarmupLR.step "
                                        r"\(last_batch_iteration: 'int \| None' = None\) -> 'None' does not take them "
                                        r"\(got an unexpected keyword argument 'increment'\); nothing was stepped"):
        engine.step(lr_kwargs={"increment": 1})
    assert all(torch.equal(a, b) for a, b in zip(weights, engine.module.parameters()))
    assert engine.global_steps == 0
    engine.step(lr_kwargs={"last_batch_iteration": 2})  # a parameter it takes: steps, and the scheduler with it
    assert engine.global_steps == 1 and engine.lr_scheduler.last_batch_iteration == 2


def test_lr_kwargs_without_a_scheduler_are_refused() -> None:
    engine, _, _, _ = zero_core.initialize(model=_model(), config=_config())
    engine.backward(_loss(engine))
    with pytest.raises(ZeroError, match=r"engine.step\(lr_kwargs=\['last_batch_iteration'\]\) but the engine has no "
                                        r"LR scheduler to pass them to"):
        engine.step(lr_kwargs={"last_batch_iteration": 3})
    engine.step(lr_kwargs={})  # nothing to pass: as without
    assert engine.global_steps == 1


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_a_model_partitioned_by_init_is_refused_below_stage_3(stage: int) -> None:
    with zero_core.Init(config=_config(zero_optimization={"stage": 3, "stage3_param_persistence_threshold": 0})):
        model = _model()
    with pytest.raises(ZeroError, match=rf"4 parameter\(s\) of Sequential are partitioned by zero_core.Init \(first: "
                                        rf"0.weight\), and zero_optimization.stage is {stage}: only stage 3 trains "
                                        r"partitioned parameters; initialize with the stage-3 config"):
        zero_core.initialize(model=model, config=_config(zero_optimization={"stage": stage}))
    engine, _, _, _ = zero_core.initialize(model=model, config=_config(zero_optimization={"stage": 3}))
    engine.backward(_loss(engine))  # the stage Init was given trains it
    engine.step()
    assert engine.was_step_applied()
