"""Cases of issue #21 that trained silently, in a world of one: each is now one clear error, or documented behaviour.

A run that skips every step after the first, parameters frozen or unfrozen after initialize, an empty batch, a loss
that reaches no trained parameter or was reduced over zero elements, a float64 model, named parameters, and
offload_param's swap buffers."""
from __future__ import annotations

from typing import Any

import pytest
import torch
import zero_core
from zero_plugins.ds_config import ConfigError, NonFiniteStepsConfig
from zero_core.offload import SwapSettings
from zero_core.sharding import SwapPool
from zero_plugins import ZeroError

pytestmark = pytest.mark.usefixtures("solo_process_group")

STAGES = (0, 1, 2, 3)


class Net(torch.nn.Module):
    """Two linear layers; takes the input as a tensor or in a dict under "x" (a tokenizer's batch)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(6, 8)
        self.second = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        if isinstance(x, dict):
            x = x["x"]
        return self.second(torch.relu(self.first(x)))


def _config(stage: int = 2, **top: Any) -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.0,
            "optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "zero_optimization": {"stage": stage}, **top}


def _engine(stage: int = 2, model: torch.nn.Module | None = None, **top: Any) -> Any:
    engine, _, _, _ = zero_core.initialize(model=model if model is not None else Net(), config=_config(stage, **top))
    return engine


def _batch(step: int = 0) -> torch.Tensor:
    return torch.randn(2, 6, generator=torch.Generator().manual_seed(step))


def _loss(engine: Any, x: torch.Tensor) -> torch.Tensor:
    return engine(x).float().pow(2).mean()


def _train_step(engine: Any, step: int = 0) -> None:
    engine.backward(_loss(engine, _batch(step)))
    engine.step()


def _weights(engine: Any) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in engine.module_state_dict().items()}


# --- 1. the consecutive-skip guard, at any point of the run ---

def test_the_skip_limits_default_to_ten_except_under_fp16_dynamic_loss_scaling() -> None:
    default = NonFiniteStepsConfig()
    assert (default.consecutive_limit(False), default.initial_limit(False)) == (10, 10)
    assert (default.consecutive_limit(True), default.initial_limit(True)) == (0, 0)  # the scaler's min_loss_scale
    given = NonFiniteStepsConfig(max_consecutive=3, max_initial=0)
    assert (given.consecutive_limit(True), given.initial_limit(False)) == (3, 0)
    assert NonFiniteStepsConfig(max_consecutive=0).consecutive_limit(False) == 0  # 0: never


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_run_that_skips_every_step_after_the_first_stops_by_default(precision: str) -> None:
    # lr 1e30: step 1 applies and makes the weights ~1e29; every later forward overflows, every gradient is NaN.
    engine = _engine(optimizer={"type": "SGD", "params": {"lr": 1e30}}, bf16={"enabled": precision == "bf16"})
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    with pytest.raises(zero_core.NonFiniteStepsError) as info:
        for step in range(30):
            engine.backward(_loss(engine, _batch(step).to(dtype)))
            engine.step()
    message = str(info.value)
    assert message.startswith("step 11: gradients are non-finite (inf or NaN); the optimizer step was skipped on "
                              "every rank, weights were not updated (10 skipped so far, 10 in a row): "
                              "non_finite_steps.max_consecutive is 10;")
    assert message.endswith("raise the limit (0: never stop)")
    assert (engine.global_steps, engine.skipped_steps) == (10, 10)  # step 1 applied, steps 2-11 skipped


def test_fewer_skips_in_a_row_than_the_limit_do_not_stop_the_run() -> None:
    engine = _engine()
    _train_step(engine)
    for step in range(1, 10):  # 9 NaN batches in a row, then good ones
        x = _batch(step)
        x[0, 0] = float("nan")
        engine.backward(_loss(engine, x))
        engine.step()
    for step in range(10, 12):
        _train_step(engine, step)
        assert engine.was_step_applied()
    assert (engine.global_steps, engine.skipped_steps) == (12, 9)


def test_fp16_dynamic_scaling_is_stopped_by_its_scaler_not_by_the_skip_limit() -> None:
    # 2**16 comes down to min_loss_scale 1 in 17 overflows (the first kept by hysteresis 2, then 16 halvings), far
    # past 10 in a row, as expected; the 18th, at the minimum, raises.
    engine = _engine(optimizer={"type": "SGD", "params": {"lr": 1e30}}, fp16={"enabled": True})
    with pytest.raises(FloatingPointError, match="fp16 gradients overflow even at the minimum loss scale 1") as info:
        for step in range(40):
            engine.backward(_loss(engine, _batch(step).half()))
            engine.step()
    assert not isinstance(info.value, zero_core.NonFiniteStepsError)
    assert engine.skipped_steps == 17


# --- 2. parameters frozen or unfrozen after initialize ---

@pytest.mark.parametrize("stage", STAGES)
def test_a_parameter_unfrozen_after_initialize_is_refused_at_the_next_backward(stage: int) -> None:
    model = Net()
    model.first.bias.requires_grad_(False)
    engine = _engine(stage, model)
    _train_step(engine)
    engine.module.first.bias.requires_grad_(True)
    with pytest.raises(ZeroError) as info:
        _train_step(engine, 1)
    assert str(info.value) == (
        "parameter first.bias was unfrozen (requires_grad set to True) after zero_core.initialize: the engine holds "
        "no gradient buffer or optimizer state for it, so it would be computed but never updated; set requires_grad "
        "before zero_core.initialize, or call engine.destroy() and initialize the model again")
    engine.module.first.bias.requires_grad_(False)  # refused before the backward began: training goes on
    _train_step(engine, 2)
    assert engine.was_step_applied()


@pytest.mark.parametrize("stage", STAGES)
def test_a_parameter_frozen_after_initialize_is_refused_at_the_next_backward(stage: int) -> None:
    engine = _engine(stage)
    engine.module.second.weight.requires_grad_(False)
    with pytest.raises(ZeroError) as info:
        _train_step(engine)
    assert str(info.value).startswith(
        "parameter second.weight was frozen (requires_grad set to False) after zero_core.initialize: the engine still "
        "holds its optimizer state and steps it (momentum and weight decay would go on changing it); set requires_grad "
        "before zero_core.initialize")


# --- 3. an empty batch, and losses that would step as if normal ---

@pytest.mark.parametrize("call, name", [
    (lambda engine, x: engine(x), "argument 0"),
    (lambda engine, x: engine(x=x), "x"),
    (lambda engine, x: engine({"x": x}), "argument 0['x']"),
])
def test_an_empty_batch_is_refused_naming_the_input(call: Any, name: str) -> None:
    engine = _engine()
    with pytest.raises(ZeroError) as info:
        call(engine, torch.randn(0, 6))
    assert str(info.value) == (
        f"engine forward: input {name} is empty (shape (0, 6)): an empty batch gives a NaN loss and zero gradients, "
        "and the step would apply as if it were a normal one; leave empty batches out before calling the engine "
        "(e.g. DataLoader(drop_last=True))")
    _train_step(engine)  # nothing happened: the next batch trains
    assert engine.was_step_applied()


@pytest.mark.parametrize("make", [
    lambda engine: _loss(engine, _batch()).detach(),
    lambda engine: torch.tensor(1.0, requires_grad=True),
])
def test_a_loss_without_autograd_graph_is_refused_before_the_backward(make: Any) -> None:
    engine = _engine()
    with torch.no_grad():
        engine(_batch())
    with pytest.raises(ZeroError) as info:
        engine.backward(make(engine))
    assert str(info.value).startswith("engine.backward(loss): the loss has no autograd graph (grad_fn is None: "
                                      "computed under torch.no_grad(), detached, or a constant)")
    _train_step(engine)
    assert engine.global_steps == 1


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("accumulation", [1, 2])
def test_a_loss_that_reaches_no_trained_parameter_is_refused(stage: int, accumulation: int) -> None:
    engine = _engine(stage, gradient_accumulation_steps=accumulation)
    before = _weights(engine)
    scale = torch.ones(2, 3, requires_grad=True)  # the loss depends on this input only
    with pytest.raises(ZeroError) as info:
        engine.backward((engine(_batch()).detach() * scale).sum())
    assert str(info.value) == (
        "engine.backward(loss): no gradient reached any trainable parameter: the loss does not depend on the "
        "parameters being trained (it was computed from the inputs, from detached outputs or from frozen parameters "
        "only), and the step would apply zero gradients; compute the loss from the engine's forward output")
    for step in range(accumulation):  # the refused backward does not count: a corrected one may follow
        _train_step(engine, step)
    assert engine.was_step_applied() and engine.global_steps == 1
    assert any(not torch.equal(before[name], value) for name, value in _weights(engine).items())


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_a_loss_reduced_over_zero_elements_stops_the_step_before_it_applies(stage: int) -> None:
    engine = _engine(stage)
    before = _weights(engine)
    logits = engine(_batch())
    loss = torch.nn.functional.cross_entropy(logits.float(), torch.tensor([-100, -100]))  # every label ignored: NaN
    engine.backward(loss)
    with pytest.raises(ZeroError) as info:
        engine.step()
    assert str(info.value) == (
        "step 1: a loss since the last step was NaN while every gradient is finite: it was reduced over zero elements "
        "(an empty batch, or every label ignored), and the step would apply as if the batch were normal; it was not "
        "applied; leave such micro-batches out before engine.backward (and call engine.zero_grad() to go on)")
    assert all(torch.equal(before[name], value) for name, value in _weights(engine).items())
    assert (engine.global_steps, engine.skipped_steps) == (0, 0)
    engine.zero_grad()
    _train_step(engine, 1)
    assert engine.was_step_applied() and engine.global_steps == 1


def test_a_nan_loss_with_nan_gradients_is_still_a_skipped_step() -> None:
    engine = _engine()
    x = _batch()
    x[0, 0] = float("nan")
    engine.backward(_loss(engine, x))
    engine.step()
    assert not engine.was_step_applied() and engine.skipped_steps == 1
    _train_step(engine, 1)  # the NaN loss of the skipped step is forgotten
    assert engine.was_step_applied()


# --- 5. float64 models ---

@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_a_float64_model_is_refused_at_initialize_naming_the_parameter(precision: str) -> None:
    model = Net()
    model.second.double()
    with pytest.raises(ZeroError) as info:
        _engine(model=model, **{precision: {"enabled": True}} if precision != "fp32" else {})
    assert str(info.value) == (
        "parameter second.weight of Net is float64; zero trains in fp32, bf16 or fp16 (the config's fp16 and bf16 "
        "blocks) and has no float64 path: convert the model with model.float() before zero_core.initialize, and feed "
        "it float32 inputs")
    _engine(model=model.float())  # the fix: the same model, converted, initializes


# --- 6. named parameters ---

@pytest.mark.parametrize("stage", [0, 2, 3])
def test_named_parameters_train_as_the_parameters_do(stage: int) -> None:
    results = []
    for given in (lambda m: m.parameters(), lambda m: m.named_parameters(),
                  lambda m: [{"params": list(m.named_parameters())}]):
        model = Net()
        model.first.bias.requires_grad_(False)  # a frozen parameter among the named ones stays frozen
        engine, optimizer, _, _ = zero_core.initialize(model=model, model_parameters=given(model),
                                                       config=_config(stage))
        for step in range(2):
            _train_step(engine, step)
        assert all("param_names" not in group for group in optimizer.param_groups)
        results.append(_weights(engine))
        engine.destroy()
    for other in results[1:]:
        assert other.keys() == results[0].keys()
        assert all(torch.equal(other[name], results[0][name]) for name in other)


def test_a_mix_of_parameters_and_groups_names_what_to_pass() -> None:
    model = Net()
    with pytest.raises(ZeroError) as info:
        zero_core.initialize(model=model, model_parameters=[model.first.weight, {"params": [model.first.bias]}],
                             config=_config())
    assert str(info.value) == ("model_parameters must hold parameters, (name, parameter) pairs or param-group dicts, "
                               "not a mix: pass model.parameters(), model.named_parameters() or a list of dicts")


# --- 7. offload_param's swap buffers ---

def test_a_parameter_swap_pool_without_buffers_names_offload_param() -> None:
    settings = SwapSettings(buffer_count=0, buffer_numel=16, block_path="zero_optimization.offload_param",
                            dtype=torch.bfloat16)
    with pytest.raises(ConfigError) as info:
        SwapPool(None, settings)  # type: ignore[arg-type]  # refused before the swap space is used
    assert str(info.value) == ("zero_optimization.offload_param.buffer_count: is 0, but the parameter partitions are "
                               "read into them; set it to at least 1")
