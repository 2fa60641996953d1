"""What each ZeRO stage shards, how it reduces gradients, and where each copy of the state lives.

One frozen `StagePolicy` per stage replaces an integer stage threaded through the engine:
the buckets, the reducer, the optimizer and the builders ask the policy a named question
(`shards_gradients`, `grad_reduction`, ...) instead of comparing stage numbers. Where each
copy lives (on the device, or at which offload device, pinned or not) is part of the policy,
so offload is one more field here, read from the ds_config's `offload_param` and
`offload_optimizer` blocks.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING


if TYPE_CHECKING:
    from zero_plugins.ds_config import OffloadOptimizerConfig, OffloadParamConfig, ZeroOptimizationConfig


class GradReduction(enum.Enum):
    """How gradients are averaged across ranks."""

    ALL_REDUCE_AT_BOUNDARY = "all-reduce whole gradients at the accumulation boundary"
    REDUCE_SCATTER_AT_BOUNDARY = "reduce-scatter whole gradients at the accumulation boundary"
    REDUCE_SCATTER_EVERY_BACKWARD = "reduce-scatter in buckets during every backward, keeping only the partition"


@dataclass(frozen=True, kw_only=True)
class Residence:
    """Where one copy lives: on the device, or at a registered offload device (its memory's
    placement, host or NVMe, is the device's own); and whether pinning was asked for."""

    offload_device: str | None = None  # the offload device's registered name ("cpu", "nvme", a plugin's)
    pinned: bool = False

    @property
    def offloaded(self) -> bool:
        return self.offload_device is not None


ON_DEVICE = Residence()


@dataclass(frozen=True, kw_only=True)
class StagePolicy:
    stage: int
    shards_optimizer_state: bool  # each rank keeps and steps only its partition of master and optimizer state
    shards_gradients: bool  # each rank keeps only the gradient partition it steps
    shards_parameters: bool  # each rank keeps only a partition of the 16-bit parameters between uses
    grad_reduction: GradReduction
    parameters: Residence = ON_DEVICE  # 16-bit parameter partitions between uses
    gradients: Residence = ON_DEVICE  # gradients as the step reads them
    master: Residence = ON_DEVICE  # fp32 master weights
    optimizer_state: Residence = ON_DEVICE

    @property
    def offloaded(self) -> dict[str, Residence]:
        """The copies that do not live on the device, by name."""
        copies = {"parameters": self.parameters, "gradients": self.gradients, "master": self.master,
                  "optimizer_state": self.optimizer_state}
        return {name: residence for name, residence in copies.items() if residence.offloaded}


STAGE_POLICIES: dict[int, StagePolicy] = {
    0: StagePolicy(stage=0, shards_optimizer_state=False, shards_gradients=False, shards_parameters=False,
                   grad_reduction=GradReduction.ALL_REDUCE_AT_BOUNDARY),
    1: StagePolicy(stage=1, shards_optimizer_state=True, shards_gradients=False, shards_parameters=False,
                   grad_reduction=GradReduction.REDUCE_SCATTER_AT_BOUNDARY),
    2: StagePolicy(stage=2, shards_optimizer_state=True, shards_gradients=True, shards_parameters=False,
                   grad_reduction=GradReduction.REDUCE_SCATTER_EVERY_BACKWARD),
    3: StagePolicy(stage=3, shards_optimizer_state=True, shards_gradients=True, shards_parameters=True,
                   grad_reduction=GradReduction.REDUCE_SCATTER_EVERY_BACKWARD),
}


def policy_for(zero: ZeroOptimizationConfig) -> StagePolicy:
    """The stage's policy with the placements the offload blocks ask for."""
    policy = STAGE_POLICIES[zero.stage]
    optimizer = _residence(zero.offload_optimizer)
    if optimizer.offloaded:
        # The step runs where the optimizer state lives, so it reads gradients and master there too.
        policy = replace(policy, gradients=optimizer, master=optimizer, optimizer_state=optimizer)
    parameters = _residence(zero.offload_param)
    if parameters.offloaded:
        policy = replace(policy, parameters=parameters)
    return policy


def _residence(block: OffloadOptimizerConfig | OffloadParamConfig | None) -> Residence:
    if block is None or block.device == "none":
        return ON_DEVICE
    return Residence(offload_device=block.device, pinned=bool(block.pin_memory))
