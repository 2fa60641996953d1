"""What a checkpoint saves besides tensors: counters, hyperparameters, scheduler, loss scaler, RNG, client state.

They go into the DCP checkpoint as serialized objects (torch.save into BytesIO, read back with torch's
restricted `weights_only` load: _trust.py): `training` (the same on every rank, written once), and
`rng.rank<r>` (each rank's own generators; a rank that loads from a checkpoint of fewer ranks takes
rank r mod N's). What cannot be read back that way is refused at save time (_storable.py).
"""
from __future__ import annotations

import random
from typing import Any, Protocol

import torch

from zero_plugins.ds_config import ZeroConfig
from ..comm import RankProgress
from ..sharding import StagePolicy, SwappedMaster, ZeroOptimizer
from ._storable import check_client_state, check_engine_state

_COUNTERS = ("global_steps", "global_samples", "micro_steps", "skipped_steps")


class TrainingEngine(Protocol):
    """What checkpoints read and restore of an engine (ZeroEngine has all of it)."""

    module: torch.nn.Module
    optimizer: ZeroOptimizer
    lr_scheduler: Any
    policy: StagePolicy
    zero_config: ZeroConfig
    compute_dtype: torch.dtype
    global_rank: int
    world_size: int
    global_steps: int
    global_samples: int
    micro_steps: int
    skipped_steps: int

    @property
    def progress(self) -> RankProgress:
        """Where this rank is (posted for its peers): a save's failed collective names the peer it lost."""


def training_state(engine: TrainingEngine, client_state: Any) -> dict[str, Any]:
    """What `training` holds; one error naming the value when client_state (or a scheduler's state) cannot be stored."""
    stored_client_state = check_client_state(client_state)
    optimizer = engine.optimizer
    steps = []
    for group in optimizer.groups:
        step = next((optimizer.state[p]["step"] for p in group.master.optimizer_params
                     if "step" in optimizer.state.get(p, {})), None)
        steps.append(step.clone() if isinstance(step, torch.Tensor) else step)
    state = {
        "counters": {name: getattr(engine, name) for name in _COUNTERS},
        "param_groups": [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups],
        "optimizer_steps": steps,
        "loss_scaler": optimizer.loss_scaler.state_dict(),
        "lr_scheduler": engine.lr_scheduler.state_dict() if engine.lr_scheduler is not None else None,
    }
    check_engine_state(state)
    return {**state, "client_state": stored_client_state}


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def restore_rng(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])


def restore_counters(engine: TrainingEngine, state: dict[str, Any]) -> None:
    for name, value in state["counters"].items():
        setattr(engine, name, value)


def restore_optimizer(engine: TrainingEngine, state: dict[str, Any], scheduler: bool) -> None:
    optimizer = engine.optimizer
    for group, saved in zip(optimizer.param_groups, state["param_groups"]):
        group.update(saved)
    optimizer.loss_scaler.load_state_dict(state["loss_scaler"])
    if scheduler and engine.lr_scheduler is not None and state["lr_scheduler"] is not None:
        engine.lr_scheduler.load_state_dict(state["lr_scheduler"])


def create_optimizer_state(engine: TrainingEngine, names: list[str], steps: list[Any]) -> None:
    """Make the optimizer state a checkpoint will be loaded into, where the optimizer has not made it yet
    (it makes it lazily, at its first step): zeros for each saved state name, and the saved step count."""
    optimizer = engine.optimizer
    for group, step in zip(optimizer.groups, steps):
        if isinstance(group.master, SwappedMaster):
            group.master.prepare_state(optimizer.optimizer, names, step)
            continue
        for param in group.master.optimizer_params:
            state = optimizer.state[param]
            for name in names:
                if name not in state:
                    state[name] = torch.zeros_like(param)
            if step is not None:
                state["step"] = step.clone() if isinstance(step, torch.Tensor) else step
