"""DeepSpeed's learning-rate schedules by config name: WarmupLR, WarmupDecayLR, WarmupCosineLR.

The formulas are DeepSpeed 0.19's, so a ds_config's `scheduler` block gives the same
learning rates. As in DeepSpeed, building a schedule sets the learning rate of step 0, and
the engine steps it after every optimizer step that was not skipped.
"""
from __future__ import annotations

import abc
import inspect
import math
import warnings
from typing import TYPE_CHECKING, Any

import torch

from zero_plugins.ds_config import ConfigError

if TYPE_CHECKING:
    from zero_plugins.ds_config import SchedulerConfig, ZeroConfig

_WARMUP_TYPES = ("log", "linear")


class ScheduleWarning(UserWarning):
    """A schedule that is valid but almost surely not meant: it would train at a learning rate of 0 (or its floor)."""


def _warn_total_below_warmup(cls: str, total_num_steps: int, warmup_num_steps: int, after: str) -> None:
    """DeepSpeed builds such a schedule without a word; its decay then ends before it starts."""
    if total_num_steps < warmup_num_steps:
        warnings.warn(ScheduleWarning(
            f"{cls}: scheduler.params.total_num_steps ({total_num_steps}) is below scheduler.params.warmup_num_steps "
            f"({warmup_num_steps}), so there is no decay: the lr rises for {warmup_num_steps} steps, then {after} "
            "for the rest of training; set total_num_steps to the run's optimizer steps (above warmup_num_steps)"),
            stacklevel=3)


class _Schedule(abc.ABC):
    """Shared machinery: per-group values, step counting, get_last_lr, state."""

    def __init__(self, optimizer: torch.optim.Optimizer, warmup_num_steps: int, warmup_type: str) -> None:
        if warmup_type not in _WARMUP_TYPES:
            raise ConfigError("scheduler.params.warmup_type", f"must be 'log' or 'linear' (got {warmup_type!r})")
        if not isinstance(warmup_num_steps, int) or warmup_num_steps <= 0:
            raise ConfigError("scheduler.params.warmup_num_steps", f"must be a positive integer (got {warmup_num_steps!r})")
        self.optimizer = optimizer
        self.warmup_num_steps = max(2, warmup_num_steps)
        self.warmup_type = warmup_type
        self.last_batch_iteration = -1
        self._last_lr = self._apply()

    def _warmup_fraction(self) -> float:
        if self.warmup_type == "log":
            return math.log(self.last_batch_iteration + 1) / math.log(self.warmup_num_steps)
        return self.last_batch_iteration / self.warmup_num_steps

    @abc.abstractmethod
    def get_lr(self) -> list[float]:
        """The learning rate of each param group at `last_batch_iteration`."""

    def step(self, last_batch_iteration: int | None = None) -> None:
        self.last_batch_iteration = self.last_batch_iteration + 1 if last_batch_iteration is None else last_batch_iteration
        self._last_lr = self._apply()

    def get_last_lr(self) -> list[float]:
        return self._last_lr

    def state_dict(self) -> dict[str, Any]:
        return {"last_batch_iteration": self.last_batch_iteration}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last_batch_iteration = state["last_batch_iteration"]

    def _apply(self) -> list[float]:
        lrs = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        return lrs

    def _per_group(self, value: float | list[float], name: str) -> list[float]:
        groups = len(self.optimizer.param_groups)
        if isinstance(value, (list, tuple)):
            if len(value) != groups:
                raise ConfigError(f"scheduler.params.{name}", f"has {len(value)} values for {groups} param groups")
            return list(value)
        return [value] * groups


class WarmupLR(_Schedule):
    """From warmup_min_lr to warmup_max_lr over warmup_num_steps (log or linear), then constant."""

    def __init__(self, optimizer: torch.optim.Optimizer, warmup_min_lr: float = 0.0,
                 warmup_max_lr: float | list[float] | None = None, warmup_num_steps: int = 1000,
                 warmup_type: str = "log") -> None:
        self.optimizer = optimizer
        given = warmup_max_lr is not None
        if warmup_max_lr is None:
            warmup_max_lr = [group["lr"] for group in optimizer.param_groups]
        self.min_lrs = self._per_group(warmup_min_lr, "warmup_min_lr")
        self.max_lrs = self._per_group(warmup_max_lr, "warmup_max_lr")
        super().__init__(optimizer, warmup_num_steps, warmup_type)
        if given and all(lr == 0 for lr in self.max_lrs):
            warnings.warn(ScheduleWarning(
                f"{type(self).__name__}: scheduler.params.warmup_max_lr is 0, so every step after warmup trains at "
                "lr 0; set it to the peak lr (left out, it is the optimizer's lr)"), stacklevel=2)

    def _gamma(self) -> float:
        return self._warmup_fraction() if self.last_batch_iteration < self.warmup_num_steps else 1.0

    def get_lr(self) -> list[float]:
        if self.last_batch_iteration < 0:
            return list(self.min_lrs)
        gamma = self._gamma()
        return [low + (high - low) * gamma for low, high in zip(self.min_lrs, self.max_lrs)]


class WarmupDecayLR(WarmupLR):
    """WarmupLR, then linear decay to 0 at total_num_steps."""

    def __init__(self, optimizer: torch.optim.Optimizer, total_num_steps: int, warmup_min_lr: float = 0.0,
                 warmup_max_lr: float | list[float] = 0.001, warmup_num_steps: int = 1000,
                 warmup_type: str = "log") -> None:
        self.total_num_steps = total_num_steps
        super().__init__(optimizer, warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type)
        _warn_total_below_warmup("WarmupDecayLR", total_num_steps, warmup_num_steps, "drops to 0 and stays there")

    def _gamma(self) -> float:
        if self.last_batch_iteration < self.warmup_num_steps:
            return self._warmup_fraction()
        remaining = self.total_num_steps - self.last_batch_iteration
        return max(0.0, remaining / max(1.0, self.total_num_steps - self.warmup_num_steps))


class WarmupCosineLR(_Schedule):
    """A ratio of each group's initial lr: warmup from warmup_min_ratio to 1, then cosine down to cos_min_ratio."""

    def __init__(self, optimizer: torch.optim.Optimizer, total_num_steps: int, warmup_min_ratio: float = 0.0,
                 warmup_num_steps: int = 1000, cos_min_ratio: float = 0.0001, warmup_type: str = "log") -> None:
        self.optimizer = optimizer
        self.total_num_steps = total_num_steps
        self.warmup_min_ratio = warmup_min_ratio
        self.cos_min_ratio = cos_min_ratio
        self.org_lrs = [group["lr"] for group in optimizer.param_groups]
        super().__init__(optimizer, warmup_num_steps, warmup_type)
        _warn_total_below_warmup("WarmupCosineLR", total_num_steps, warmup_num_steps,
                                 f"drops to cos_min_ratio ({cos_min_ratio:g}) of it and stays there")

    def _ratio(self) -> float:
        if self.last_batch_iteration < self.warmup_num_steps:
            return self.warmup_min_ratio + self._warmup_fraction() * (1.0 - self.warmup_min_ratio)
        done = self.last_batch_iteration - self.warmup_num_steps + 1
        progress = min(1.0, done / max(1, self.total_num_steps - self.warmup_num_steps))
        cosine = (1 + math.cos(math.pi * progress)) / 2
        return max(0.0, self.cos_min_ratio + (1.0 - self.cos_min_ratio) * cosine)

    def get_lr(self) -> list[float]:
        if self.last_batch_iteration < 0:
            return [0.0 for _ in self.org_lrs]
        ratio = self._ratio()
        return [lr * ratio for lr in self.org_lrs]


SCHEDULES: dict[str, type[_Schedule]] = {cls.__name__: cls for cls in (WarmupLR, WarmupDecayLR, WarmupCosineLR)}


def build_scheduler(config: SchedulerConfig, optimizer: torch.optim.Optimizer) -> _Schedule:
    cls = SCHEDULES.get(config.type)
    if cls is None:
        raise ConfigError("scheduler.type", f"unknown scheduler {config.type!r}; zero supports {', '.join(SCHEDULES)}")
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "optimizer")]
    for key in config.params:
        if key not in accepted:
            raise ConfigError(f"scheduler.params.{key}", f"is not a parameter of {cls.__name__} (it takes {', '.join(accepted)})")
    required = [p for p, spec in inspect.signature(cls.__init__).parameters.items()
                if spec.default is inspect.Parameter.empty and p not in ("self", "optimizer")]
    for key in required:
        if key not in config.params:
            raise ConfigError(f"scheduler.params.{key}", f"is required by {cls.__name__}")
    return cls(optimizer, **config.params)


def resolve_scheduler(config: ZeroConfig, client: Any, optimizer: torch.optim.Optimizer) -> Any:
    """The client's scheduler (or callable) wins over the config's, as in DeepSpeed."""
    if client is not None:
        return client(optimizer) if callable(client) and not hasattr(client, "step") else client
    if config.scheduler is not None:
        return build_scheduler(config.scheduler, optimizer)
    return None
