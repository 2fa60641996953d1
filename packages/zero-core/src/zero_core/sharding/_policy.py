"""What each ZeRO stage shards and how it reduces gradients, with the placement plan of its copies.

One frozen `StagePolicy` per stage replaces an integer stage threaded through the engine:
the buckets, the reducer, the optimizer and the builders ask the policy a named question
(`shards_gradients`, `grad_reduction`, ...) instead of comparing stage numbers. Where each
copy lives is the placement plan's answer (zero_plugins.placement), built once from the
ds_config and carried here, so that no builder decides a placement of its own.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from zero_plugins.placement import Copy, PlacementPlan


class GradReduction(enum.Enum):
    """How gradients are averaged across ranks."""

    ALL_REDUCE_AT_BOUNDARY = "all-reduce whole gradients at the accumulation boundary"
    REDUCE_SCATTER_AT_BOUNDARY = "reduce-scatter whole gradients at the accumulation boundary"
    REDUCE_SCATTER_EVERY_BACKWARD = "reduce-scatter in buckets during every backward, keeping only the partition"


@dataclass(frozen=True, kw_only=True)
class StagePolicy:
    stage: int
    shards_optimizer_state: bool  # each rank keeps and steps only its partition of master and optimizer state
    shards_gradients: bool  # each rank keeps only the gradient partition it steps
    shards_parameters: bool  # each rank keeps only a partition of the parameters between uses
    grad_reduction: GradReduction
    plan: PlacementPlan  # where every copy lives

    @property
    def optimizer_offloaded(self) -> bool:
        return self.plan.offloaded(Copy.MASTER) is not None  # (SGD without momentum keeps no state, but a master)

    @property
    def parameters_offloaded(self) -> bool:
        return self.plan.offloaded(Copy.PARAM_PARTITION) is not None


# Per stage: shards the optimizer state, the gradients, the parameters; how gradients are reduced.
_STAGES: dict[int, tuple[bool, bool, bool, GradReduction]] = {
    0: (False, False, False, GradReduction.ALL_REDUCE_AT_BOUNDARY),
    1: (True, False, False, GradReduction.REDUCE_SCATTER_AT_BOUNDARY),
    2: (True, True, False, GradReduction.REDUCE_SCATTER_EVERY_BACKWARD),
    3: (True, True, True, GradReduction.REDUCE_SCATTER_EVERY_BACKWARD),
}


def policy_for(plan: PlacementPlan) -> StagePolicy:
    """The policy of the plan's stage, carrying the plan."""
    optimizer, gradients, parameters, reduction = _STAGES[plan.inputs.stage]
    return StagePolicy(stage=plan.inputs.stage, shards_optimizer_state=optimizer, shards_gradients=gradients,
                       shards_parameters=parameters, grad_reduction=reduction, plan=plan)
