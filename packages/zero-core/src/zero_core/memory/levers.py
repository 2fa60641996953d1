"""What each lever would take off a measured peak, computed from the lines held at that peak.

First-order figures: a lever is applied to the categories it acts on, the rest held as measured.
Activations scale with the micro-batch; a ZeRO stage keeps 1/world of what it shards; offload moves
a category off the device. Checkpointing needs the model's layer structure, which the ledger does
not see: `zero estimate --explain` computes it.
"""
from __future__ import annotations

from dataclasses import dataclass

from zero_plugins import Category

@dataclass(frozen=True)
class LeverSetup:
    """The engine's setup, as far as the levers need it."""

    stage: int
    world_size: int
    optimizer_offloaded: bool
    parameters_offloaded: bool


@dataclass(frozen=True)
class MeasuredLever:
    """One change and the bytes it would take off the peak."""

    name: str
    saves: int


def _held(held: dict[str, int], prefix: str) -> int:
    return sum(value for category, value in held.items() if category.split(".")[0] == prefix)


def measured_levers(held: dict[str, int], setup: LeverSetup) -> list[MeasuredLever]:
    """Each lever that acts on something held at the peak, largest saving first."""
    world = setup.world_size
    sharded_away = 1 - 1 / world  # what a stage that shards a copy takes off this rank
    activations, optimizer = _held(held, Category.ACTIVATIONS), _held(held, "optim")
    gradients, parameters = _held(held, "grad"), _held(held, "param")
    out: list[MeasuredLever] = []
    if activations:
        out.append(MeasuredLever("halve the micro-batch (activations scale with it)", activations // 2))
    if optimizer and setup.stage == 0 and world > 1:
        out.append(MeasuredLever(f"stage 1 (keeps 1/{world} of the fp32 master and optimizer state)", int(optimizer * sharded_away)))
    if optimizer and not setup.optimizer_offloaded:
        out.append(MeasuredLever("offload_optimizer (moves the fp32 master, its gradients and the optimizer state off the device)", optimizer))
    if gradients and setup.stage < 2 and world > 1:
        out.append(MeasuredLever(f"stage 2 (keeps 1/{world} of the gradients)", int(gradients * sharded_away)))
    if parameters and setup.stage < 3 and world > 1:
        out.append(MeasuredLever(f"stage 3 (keeps 1/{world} of the weights between uses)",
                                 int(parameters * sharded_away)))
    return sorted((lever for lever in out if lever.saves > 0), key=lambda lever: -lever.saves)
