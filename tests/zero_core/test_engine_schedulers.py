"""DeepSpeed's LR schedules by config name give DeepSpeed's learning rates."""
from __future__ import annotations

import math
import warnings

import pytest
import torch
from zero_plugins.ds_config import ConfigError, load_config
from zero_core.training import ScheduleWarning, build_scheduler

SCHEDULES = {
    "WarmupLR": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.01, "warmup_num_steps": 5},
    "WarmupDecayLR": {"total_num_steps": 12, "warmup_max_lr": 0.01, "warmup_num_steps": 4, "warmup_type": "linear"},
    "WarmupCosineLR": {"total_num_steps": 12, "warmup_num_steps": 4, "warmup_min_ratio": 0.1},
}


def optimizer(lr: float = 0.02) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=lr)


def schedule(kind: str, params: dict, opt: torch.optim.Optimizer):  # type: ignore[no-untyped-def]
    config = load_config({"train_batch_size": 1, "scheduler": {"type": kind, "params": params}})
    return build_scheduler(config.scheduler, opt)


def lrs(sched, opt: torch.optim.Optimizer, steps: int = 14) -> list[float]:  # type: ignore[no-untyped-def]
    values = [opt.param_groups[0]["lr"]]
    for _ in range(steps):
        sched.step()
        values.append(opt.param_groups[0]["lr"])
    return values


def test_warmup_lr_log_then_constant() -> None:
    opt = optimizer()
    values = lrs(schedule("WarmupLR", SCHEDULES["WarmupLR"], opt), opt, 7)
    expected = [0.0] + [0.01 * math.log(i + 1) / math.log(5) for i in range(5)] + [0.01, 0.01]
    assert values == pytest.approx(expected)


def test_warmup_decay_lr_decays_to_zero_at_the_total() -> None:
    opt = optimizer()
    values = lrs(schedule("WarmupDecayLR", SCHEDULES["WarmupDecayLR"], opt), opt)
    assert values[:5] == pytest.approx([0.0, 0.0, 0.0025, 0.005, 0.0075])
    assert values[5] == pytest.approx(0.01 * (12 - 4) / 8)
    assert values[13:] == [0.0, 0.0]


def test_warmup_cosine_is_a_ratio_of_the_optimizer_lr() -> None:
    opt = optimizer(lr=0.02)
    values = lrs(schedule("WarmupCosineLR", SCHEDULES["WarmupCosineLR"], opt), opt)
    assert values[1] == pytest.approx(0.02 * 0.1)
    assert values[5] == pytest.approx(0.02 * (0.0001 + 0.9999 * (1 + math.cos(math.pi / 8)) / 2))
    assert values[-1] == pytest.approx(0.02 * 0.0001)


@pytest.mark.parametrize("kind", list(SCHEDULES))
def test_same_learning_rates_as_deepspeed(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    lr_schedules = pytest.importorskip("deepspeed.runtime.lr_schedules")
    ours, theirs = optimizer(), optimizer()
    reference = getattr(lr_schedules, kind)(theirs, **SCHEDULES[kind])
    assert lrs(schedule(kind, SCHEDULES[kind], ours), ours) == pytest.approx(lrs(reference, theirs))


@pytest.mark.parametrize(
    "kind,params,message",
    [
        ("OneCycle", {}, "scheduler.type: unknown scheduler 'OneCycle'; zero supports WarmupLR"),
        ("WarmupLR", {"warmup_steps": 3}, "scheduler.params.warmup_steps: is not a parameter of WarmupLR"),
        ("WarmupDecayLR", {}, "scheduler.params.total_num_steps: is required by WarmupDecayLR"),
        ("WarmupLR", {"warmup_type": "cubic"}, "scheduler.params.warmup_type: must be 'log' or 'linear'"),
        ("WarmupLR", {"warmup_num_steps": 0}, "scheduler.params.warmup_num_steps: must be a positive integer"),
        ("WarmupLR", {"warmup_min_lr": [0.1, 0.2]}, "scheduler.params.warmup_min_lr: has 2 values for 1 param groups"),
    ],
)
def test_bad_scheduler_settings_name_the_key(kind: str, params: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        schedule(kind, params, optimizer())


@pytest.mark.parametrize(("kind", "params", "after"), [
    ("WarmupDecayLR", {"total_num_steps": 3, "warmup_max_lr": 0.01, "warmup_num_steps": 5, "warmup_type": "linear"},
     "drops to 0 and stays there"),
    ("WarmupCosineLR", {"total_num_steps": 3, "warmup_num_steps": 5, "warmup_type": "linear"},
     "drops to cos_min_ratio (0.0001) of it and stays there"),
])
def test_a_total_below_the_warmup_is_said_at_build(kind: str, params: dict, after: str) -> None:
    opt = optimizer()
    with pytest.warns(ScheduleWarning) as caught:
        sched = schedule(kind, params, opt)
    assert [str(w.message) for w in caught] == [
        f"{kind}: scheduler.params.total_num_steps (3) is below scheduler.params.warmup_num_steps (5), so there is "
        f"no decay: the lr rises for 5 steps, then {after} for the rest of training; set total_num_steps to the "
        "run's optimizer steps (above warmup_num_steps)"]
    values = lrs(sched, opt, 8)
    assert values[6:] == [values[6]] * 3 and values[6] == (0.0 if kind == "WarmupDecayLR" else pytest.approx(2e-6))


def test_a_warmup_max_lr_of_zero_is_said_at_build() -> None:
    opt = optimizer()
    with pytest.warns(ScheduleWarning, match=r"^WarmupLR: scheduler.params.warmup_max_lr is 0, so every step after "
                                             r"warmup trains at lr 0; set it to the peak lr"):
        schedule("WarmupLR", {"warmup_max_lr": 0.0, "warmup_num_steps": 2}, opt)


@pytest.mark.parametrize("kind", list(SCHEDULES))
def test_sound_schedules_build_without_a_warning(kind: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScheduleWarning)
        schedule(kind, SCHEDULES[kind], optimizer())
