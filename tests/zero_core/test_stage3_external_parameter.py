"""`zero_core.zero.register_external_parameter` at stage 3 on 2 ranks (stage3/_external.py).

DeepSpeed's own example: a parent module registers `layer1.weight`, which `layer2` uses. Here `layer2` reads the
weight's `.shape` before any op, an attribute read the stage-3 mode does not treat as a use: unregistered, the
released weight is empty there and the forward fails; registered, it is gathered with the parent and the model
trains exactly as in plain torch (losses and final weights), forward and backward.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch
from zero_plugins import ZeroError

from multirank import run_ranks

WORLD_SIZE = 2


class _Borrowing(torch.nn.Module):
    """Applies a weight it is handed, reading its shape first (as a kernel wrapper sizing its output would)."""

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        rows, columns = weight.shape
        return x @ weight.view(rows, columns)


class _Parent(torch.nn.Module):
    def __init__(self, register: bool) -> None:
        super().__init__()
        self.layer1 = torch.nn.Linear(4, 4)
        self.layer2 = _Borrowing()
        if register:
            import zero_core as deepspeed

            deepspeed.zero.register_external_parameter(self, self.layer1.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer2(torch.tanh(self.layer1(x)), self.layer1.weight).sum(dim=1)


def _config() -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
            "gradient_clipping": 0.0, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}


def _data() -> torch.Tensor:
    return torch.randn(3, WORLD_SIZE, 2, 4, generator=torch.Generator().manual_seed(1))


def _reference() -> tuple[list[float], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = _Parent(register=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in _data():
        for batch in step:
            (model(batch).pow(2).mean() / WORLD_SIZE).backward()
        losses.append(model(step[0]).pow(2).mean().item())
        optimizer.step()
        optimizer.zero_grad()
    return losses, {name: value.detach().clone() for name, value in model.state_dict().items()}


def _train(rank: int, register: bool) -> dict[str, Any]:
    import zero_core

    torch.manual_seed(0)
    engine, _, _, _ = zero_core.initialize(model=_Parent(register), config=_config())
    losses = []
    try:
        for step in _data():
            loss = engine(step[rank]).pow(2).mean()
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
    except ValueError as error:
        return {"error": str(error)}
    state = engine.module_state_dict()
    engine.destroy()
    return {"losses": losses, "state": state}


def _both(rank: int, world_size: int) -> dict[bool, dict[str, Any]]:
    """Registered, then unregistered (whose forward fails), in one 2-rank job: one spawn, not two."""
    return {register: _train(rank, register) for register in (True, False)}


@pytest.fixture(scope="module")
def trained() -> list[dict[bool, dict[str, Any]]]:
    return run_ranks(_both, WORLD_SIZE, timeout=90)


def test_a_registered_parameter_is_gathered_for_the_module_that_uses_it(
        trained: list[dict[bool, dict[str, Any]]]) -> None:
    result = trained[0][True]
    reference_losses, reference_state = _reference()
    assert result["losses"] == pytest.approx(reference_losses, rel=1e-6)
    for name, value in result["state"].items():
        torch.testing.assert_close(value, reference_state[name], rtol=1e-6, atol=1e-7, msg=name)


def test_unregistered_the_shape_read_sees_the_released_weight(trained: list[dict[bool, dict[str, Any]]]) -> None:
    assert trained[0][False] == {"error": "not enough values to unpack (expected 2, got 1)"}, \
        "the registration is what makes the model work"


def test_only_a_parameter_can_be_registered() -> None:
    import zero_core as deepspeed

    with pytest.raises(ZeroError) as error:
        deepspeed.zero.register_external_parameter(torch.nn.Linear(2, 2), torch.zeros(2))
    assert str(error.value) == ("register_external_parameter needs a torch.nn.Parameter (got Tensor); pass the "
                                "module attribute itself, e.g. other.weight")
