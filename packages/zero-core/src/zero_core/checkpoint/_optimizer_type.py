"""Which optimizer a checkpoint's optimizer state belongs to: recorded at save, compared before a load changes anything.

Loading one optimizer's state into another runs silently wrong (AdamW's hyperparameters, lr included, written
into SGD's param groups) or fails later inside the step (SGD's state in AdamW: `KeyError: 'exp_avg'`). A
checkpoint records its optimizer's type; one saved before that was recorded (or imported from DeepSpeed) is
compared by the names of the param-sized state it holds.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from zero_plugins import ZeroError

_FIX = ("pass load_optimizer_states=False to load the weights alone (the optimizer then starts fresh, with this "
        "config's hyperparameters), or configure the checkpoint's optimizer (the config's optimizer.type)")


def optimizer_type(optimizer: torch.optim.Optimizer) -> str:
    """The algorithm by torch's name: a CPU optimizer (zero-offload's CPUAdam, CPUAdagrad, ...) steps the same
    state as torch's, so a checkpoint moves between an offloaded and a device-resident optimizer."""
    # DeepSpeed's CPU Adam convention: one class for both, switched by `adamw_mode`.
    adamw_mode = getattr(optimizer, "adamw_mode", None)
    if isinstance(adamw_mode, bool):
        return "AdamW" if adamw_mode else "Adam"
    return type(optimizer).__name__.removeprefix("CPU")


def check_optimizer_type(saved_type: str | None, saved_state: list[str], optimizer: torch.optim.Optimizer,
                         where: Path) -> None:
    """One error naming both optimizers when the checkpoint's optimizer state is not this optimizer's."""
    ours = optimizer_type(optimizer)
    if saved_type is not None:
        if saved_type != ours:
            raise ZeroError(f"checkpoint {where} holds the optimizer state of {saved_type}, and this engine's "
                            f"optimizer is {ours}: loading it would step {ours} with {saved_type}'s hyperparameters "
                            f"and state; {_FIX}")
        return
    # Not recorded: the state names tell. None saved (a checkpoint from before its first step) loads anywhere.
    expected = state_names_of(optimizer)
    if saved_state and expected is not None and sorted(saved_state) != expected:
        raise ZeroError(f"checkpoint {where} holds optimizer state {', '.join(sorted(saved_state)) or 'none'} (its "
                        f"optimizer type is not recorded), and this engine's optimizer {ours} keeps "
                        f"{', '.join(expected) or 'none'}: it is another optimizer's; {_FIX}")


def state_names_of(optimizer: torch.optim.Optimizer) -> list[str] | None:
    """The param-sized state one step of this optimizer makes: stepped on one throwaway element of a fresh
    optimizer of its class and first group's hyperparameters. None when its class cannot be built so."""
    probe = torch.zeros(1, requires_grad=True)
    probe.grad = torch.zeros(1)
    hyperparameters = {key: value for key, value in optimizer.param_groups[0].items() if key != "params"}
    build: Callable[..., torch.optim.Optimizer] = type(optimizer)  # a subclass: it takes no `defaults`
    try:
        fresh = build([{"params": [probe], **hyperparameters}])
    except TypeError:  # a client's class with required constructor arguments: not comparable by its state
        return None
    fresh.step()
    return sorted(name for name, value in fresh.state[probe].items()
                  if isinstance(value, torch.Tensor) and value.shape == probe.shape)
