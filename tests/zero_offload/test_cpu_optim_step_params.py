"""zero-offload's CPU optimizers step the engine's sub-groups through an explicit call (`step_params`).

The engine no longer swaps a CPU optimizer's `param_groups` to step one sub-group: it hands the views to
`step_params`, and a whole group's sub-groups go in one call (one kernel call per storage type), since the
fused CPU kernels allocate nothing per parameter. The result is the one `step()` over the group gives.
"""
from __future__ import annotations

from typing import Any

import torch
from zero_core.sharding import StepsGivenParams, step_by_sub_group, step_one
from zero_offload import CPUAdam


class CountingAdam(CPUAdam):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[int] = []  # params per kernel group call
        self.groups_seen: list[int] = []

    def _step_group(self, group: dict[str, Any], op: Any) -> None:
        self.calls.append(len(group["params"]))
        self.groups_seen.append(id(self.param_groups))
        super()._step_group(group, op)


def _params(seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    params = [torch.randn(n, generator=generator) for n in (7, 130, 33)]
    for param in params:
        param.grad = torch.randn(param.shape, generator=generator)
    return params


def test_a_group_steps_in_one_call_without_swapping_param_groups() -> None:
    params = _params(0)
    optimizer = CountingAdam(params, lr=1e-2, weight_decay=0.1)
    assert isinstance(optimizer, StepsGivenParams)
    groups = id(optimizer.param_groups)
    for _ in range(3):
        step_by_sub_group(optimizer, 0)
    assert optimizer.calls == [3, 3, 3] and set(optimizer.groups_seen) == {groups}
    reference = _params(0)
    plain = CPUAdam(reference, lr=1e-2, weight_decay=0.1)
    for _ in range(3):
        plain.step()
    for got, expected in zip(params, reference):
        assert torch.equal(got, expected)
        assert torch.equal(optimizer.state[got]["exp_avg_sq"], plain.state[expected]["exp_avg_sq"])


def test_one_sub_group_steps_alone_with_its_group_settings() -> None:
    params = _params(1)
    optimizer = CountingAdam([{"params": params[:1], "lr": 0.5}, {"params": params[1:], "lr": 1e-3}])
    before = params[2].clone()
    step_one(optimizer, 1, params[2])
    assert optimizer.calls == [1] and torch.equal(params[1], _params(1)[1]), "only the param handed over moved"
    moved = (before - params[2]).abs().max().item()
    assert 0 < moved <= 1e-3 * 1.01, "with group 1's learning rate"
