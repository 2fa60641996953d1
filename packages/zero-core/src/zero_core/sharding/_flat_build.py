"""Build stages 0-2's sharded state: parameters whole on every rank, in flat buckets per param group."""
from __future__ import annotations

import torch

from ._build_steps import BuildContext, broadcast_initial_weights, place_buffers, place_frozen
from ._groups import build_group, layout_buckets
from ._param_groups import ParamGroup
from ._state import ShardedState, WholeParameterPasses


def build_flat_state(model: torch.nn.Module, param_groups: list[ParamGroup], context: BuildContext) -> ShardedState:
    broadcast_initial_weights([*model.parameters(), *model.buffers()], context.comm)
    trained = {id(p) for group in param_groups for p in group.params}
    place_frozen([p for p in model.parameters() if id(p) not in trained], context)  # all of a forward-only engine's
    place_buffers(model, context)
    groups = [build_group(group, index, context) for index, group in enumerate(param_groups)]
    return ShardedState(groups, list(layout_buckets(groups, context)), WholeParameterPasses(model, context.rank))
