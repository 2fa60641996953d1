"""The engine's API in one process (a world of one): DeepSpeed's loop, optimizers, schedulers, fp16, errors."""
from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest
import torch
import zero_core
from zero_plugins.ds_config import ConfigError
from zero_plugins import ZeroError

from engine_helpers import wait_until_freed

pytestmark = pytest.mark.usefixtures("solo_process_group")


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def config(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 0.0,
                            "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}
    base.update(overrides)
    return base


def batches(n: int, dtype: torch.dtype = torch.float32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(5)
    return [(torch.randn(4, 6, generator=generator).to(dtype), torch.randn(4, 3, generator=generator))
            for _ in range(n)]


def train(engine, data) -> list[float]:  # type: ignore[no-untyped-def]
    losses = []
    for x, y in data:
        loss = torch.nn.functional.mse_loss(engine(x).float(), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_client_optimizer_with_param_groups_and_scheduler_trains_like_plain_torch(stage: int) -> None:
    def groups(model: torch.nn.Module) -> list[dict[str, Any]]:
        return [{"params": model[0].parameters(), "lr": 0.05}, {"params": model[2].parameters(), "momentum": 0.5}]

    reference = make_model()
    ref_opt = torch.optim.SGD(groups(reference), lr=0.1)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=2, gamma=0.5)
    model = make_model()
    client = torch.optim.SGD(groups(model), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(client, step_size=2, gamma=0.5)
    engine, optimizer, _, lr_scheduler = zero_core.initialize(
        model=model, optimizer=client, lr_scheduler=sched, config=config(optimizer=None, zero_optimization={"stage": stage}))
    assert optimizer.optimizer is client and lr_scheduler is sched
    data = batches(5)
    losses = train(engine, data)
    for x, y in data:
        loss = torch.nn.functional.mse_loss(reference(x), y)
        loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        ref_sched.step()
        assert loss.item() == pytest.approx(losses.pop(0), rel=1e-6)
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs)
    assert engine.get_lr() == [g["lr"] for g in ref_opt.param_groups]


def test_callables_build_the_optimizer_and_scheduler() -> None:
    seen: dict[str, Any] = {}

    def make_optimizer(groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
        seen["groups"] = groups
        return torch.optim.SGD(groups, lr=0.1)

    def make_scheduler(opt: torch.optim.Optimizer) -> Any:
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (step + 1))

    engine, optimizer, _, scheduler = zero_core.initialize(
        model=make_model(), optimizer=make_optimizer, lr_scheduler=make_scheduler, config=config(optimizer=None))
    assert all(t.dtype == torch.float32 for t in seen["groups"][0]["params"])
    train(engine, batches(2))
    assert engine.get_lr() == [pytest.approx(0.1 / 3)]
    assert isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR)


@pytest.mark.parametrize(
    "spec,cls",
    [
        ({"type": "Adam"}, torch.optim.AdamW),  # DeepSpeed: Adam is AdamW unless adam_w_mode is false
        ({"type": "Adam", "params": {"adam_w_mode": False, "torch_adam": True}}, torch.optim.Adam),
        ({"type": "adamw", "params": {"betas": [0.8, 0.9]}}, torch.optim.AdamW),
        ({"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}}, torch.optim.SGD),
        ({"type": "RMSprop", "params": {"lr": 0.01}}, torch.optim.RMSprop),
    ],
)
def test_optimizer_from_config(spec: dict[str, Any], cls: type) -> None:
    _, optimizer, _, _ = zero_core.initialize(model=make_model(), config=config(optimizer=spec))
    assert type(optimizer.optimizer) is cls
    if cls is torch.optim.AdamW:
        assert optimizer.param_groups[0]["weight_decay"] == 0.0  # DeepSpeed's fused Adam default
    if "betas" in spec.get("params", {}):
        assert optimizer.param_groups[0]["betas"] == (0.8, 0.9)


def test_a_client_optimizer_wins_over_the_config_block_with_a_warning() -> None:
    model = make_model()
    with pytest.warns(UserWarning, match="config's optimizer block is ignored"):
        _, optimizer, _, _ = zero_core.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.3),
                                                  config=config())
    assert type(optimizer.optimizer) is torch.optim.SGD


@pytest.mark.parametrize(
    "spec,message",
    [
        ({"type": "Adafactorial"}, "optimizer.type: unknown optimizer 'Adafactorial'"),
        ({"type": "Adam", "params": {"lr": 1e-3, "momentum": 0.9}}, "optimizer.params.momentum: is not a parameter"),
        ({"type": "Adam", "params": {"max_grad_norm": 1.0}}, "optimizer.params.max_grad_norm: .* gradient_clipping"),
        ({"type": "Adam", "params": {"bias_correction": False}}, "optimizer.params.bias_correction: false is not"),
    ],
)
def test_bad_optimizer_config(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        zero_core.initialize(model=make_model(), config=config(optimizer=spec))


def test_scheduler_from_config_is_stepped_with_the_engine() -> None:
    engine, _, _, scheduler = zero_core.initialize(model=make_model(), config=config(
        scheduler={"type": "WarmupLR", "params": {"warmup_max_lr": 0.01, "warmup_num_steps": 4,
                                                  "warmup_type": "linear"}}))
    assert engine.get_lr() == [0.0]
    train(engine, batches(3))
    assert scheduler.last_batch_iteration == 2
    assert engine.get_lr() == [pytest.approx(0.005)]


def test_fp16_overflow_skips_the_step_and_lowers_the_scale() -> None:
    engine, optimizer, _, scheduler = zero_core.initialize(model=make_model(), config=config(
        fp16={"enabled": True, "initial_scale_power": 40, "hysteresis": 1},
        scheduler={"type": "WarmupLR", "params": {"warmup_min_lr": 0.001, "warmup_max_lr": 0.01,
                                                  "warmup_num_steps": 10}},
        zero_optimization={"stage": 2}))
    before = [p.detach().clone() for p in engine.module.parameters()]
    data = batches(1, torch.float16)
    train(engine, data)
    assert engine.skipped_steps == 1 and engine.global_steps == 1
    assert optimizer.loss_scale == 2.0**39
    assert scheduler.last_batch_iteration == -1, "a skipped step does not advance the schedule"
    assert all(torch.equal(a, b) for a, b in zip(before, engine.module.parameters()))
    while engine.skipped_steps == engine.global_steps:  # 2**40 / 2**k until fp16 gradients fit
        train(engine, data)
    assert optimizer.loss_scale <= 2.0**24
    assert not all(torch.equal(a, b) for a, b in zip(before, engine.module.parameters()))
    assert all(torch.isfinite(p).all() for p in engine.module.parameters())


def test_fp16_static_scale_trains_like_fp32() -> None:
    fp32, _, _, _ = zero_core.initialize(model=make_model(), config=config())
    fp16, optimizer, _, _ = zero_core.initialize(model=make_model(), config=config(fp16={"enabled": True,
                                                                                       "loss_scale": 1024}))
    data = batches(5)
    ours = train(fp16, [(x.half(), y) for x, y in data])
    assert optimizer.loss_scale == 1024 and fp16.skipped_steps == 0
    assert ours == pytest.approx(train(fp32, data), rel=2e-2)


def test_accumulation_and_zero_grad() -> None:
    engine, _, _, _ = zero_core.initialize(model=make_model(), config=config(gradient_accumulation_steps=2))
    x, y = batches(1)[0]
    assert not engine.is_gradient_accumulation_boundary()
    engine.backward(torch.nn.functional.mse_loss(engine(x), y))
    grad = engine.module[0].weight.grad.clone()
    assert grad.abs().sum() > 0
    engine.step()
    assert engine.global_steps == 0 and engine.is_gradient_accumulation_boundary()
    engine.zero_grad(set_to_none=False)
    assert engine.module[0].weight.grad.abs().sum() == 0
    engine.module.zero_grad()  # set_to_none, as plain torch code does: the engine re-attaches its bucket
    engine.backward(torch.nn.functional.mse_loss(engine(x), y))
    torch.testing.assert_close(engine.module[0].weight.grad, grad)
    engine.zero_grad()  # DeepSpeed's default, set_to_none: the gradient memory is freed
    assert engine.module[0].weight.grad is None
    wait_until_freed(engine, ("grad.full",))  # gloo's worker lets go of the all-reduced bucket a moment later
    assert engine.memory_report()["cpu"]["grad.full"]["current"] == 0
    engine.backward(torch.nn.functional.mse_loss(engine(x), y))
    torch.testing.assert_close(engine.module[0].weight.grad, grad)
    engine.step()
    assert engine.global_steps == 1 and engine.micro_steps == 2


def test_train_eval_and_attribute_fallthrough() -> None:
    model = make_model()
    model.note = "from the model"
    engine, _, _, _ = zero_core.initialize(model=model, config=config())
    engine.eval()
    assert not model.training
    with torch.no_grad():
        out = engine(torch.randn(2, 6))
    assert out.shape == (2, 3)
    engine.train()
    assert model.training and engine.note == "from the model"
    assert engine.train_batch_size() == 4 and engine.zero_optimization_stage() == 0


def test_frozen_parameters_stay_frozen() -> None:
    model = make_model()
    model[0].requires_grad_(False)
    frozen = model[0].weight.detach().clone()
    engine, optimizer, _, _ = zero_core.initialize(model=model, config=config(zero_optimization={"stage": 2}))
    train(engine, batches(3))
    assert torch.equal(model[0].weight, frozen) and model[0].weight.grad is None
    assert sum(t.numel() for t in optimizer.param_groups[0]["params"]) == 8 * 3 + 3


def test_tracking_attributes_activations() -> None:
    engine, _, _, _ = zero_core.initialize(model=make_model(), config=config(zero_optimization={"stage": 2}))
    engine.track_memory()
    train(engine, batches(2))
    report = engine.memory_report()
    assert report["cpu"]["activations"]["peak"] > 0
    assert report["cpu"]["activations"]["current"] == 0, "activations die with the graph"
    assert "tracking is off" not in str(report)


def test_training_data_gives_a_loader_of_micro_batches() -> None:
    data = torch.utils.data.TensorDataset(torch.randn(10, 6), torch.randn(10, 3))
    _, _, loader, _ = zero_core.initialize(model=make_model(), training_data=data, config=config())
    x, y = next(iter(loader))
    assert x.shape == (4, 6) and len(loader) == 3


def test_config_from_args_path(tmp_path: Path) -> None:
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(config()))
    engine, _, _, _ = zero_core.initialize(args=types.SimpleNamespace(deepspeed_config=str(path)), model=make_model())
    assert engine.train_micro_batch_size_per_gpu() == 4


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({}, ZeroError, "no ds_config"),
        ({"config": {}, "config_params": {}}, ZeroError, "config= or config_params=, not both"),
        ({"config": config(), "mpu": object()}, ZeroError, r"mpu="),
        ({"config": config(zero_optimization={"stage": 3, "offload_param": {"device": "gpu"}})},
         ConfigError, "zero_optimization.offload_param.device: offload device 'gpu' is not available: no installed "
         "plugin provides it; devices available: cpu, nvme"),
        ({"config": config(), "optimizer": 3}, ZeroError, "optimizer must be a torch.optim.Optimizer or a callable"),
        ({"config": config(), "model_parameters": [torch.nn.Parameter(torch.zeros(2))]}, ZeroError,
         "not a parameter of the model"),
        ({"config": config(), "model_parameters": [{"params": []}, torch.zeros(1)]}, ZeroError, "not a mix"),
    ],
)
def test_bad_initialize_arguments(kwargs: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        zero_core.initialize(model=make_model(), **kwargs)


def test_parameter_groups_must_cover_trainable_parameters_once() -> None:
    model = make_model()
    with pytest.raises(ZeroError, match=r"parameters 2.weight, 2.bias require grad but are in no param group"):
        zero_core.initialize(model=model, model_parameters=model[0].parameters(), config=config())
    with pytest.raises(ZeroError, match=r"parameter 0.weight appears in more than one param group"):
        zero_core.initialize(model=model, config=config(), model_parameters=[
            {"params": [model[0].weight]}, {"params": list(model.parameters())}])
    used = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(1, 6)).sum().backward()
    used.step()
    with pytest.raises(ZeroError, match="already has state"):
        zero_core.initialize(model=model, optimizer=used, config=config(optimizer=None))


def test_backward_misuse_is_reported() -> None:
    engine, _, _, _ = zero_core.initialize(model=make_model(), config=config())
    with pytest.raises(ZeroError, match="one element"):
        engine.backward(engine(torch.randn(2, 6)))
    with pytest.raises(ZeroError, match=r"outside engine.backward\(\)"):
        engine(torch.randn(2, 6)).sum().backward()
