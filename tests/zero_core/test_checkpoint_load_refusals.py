"""A load that cannot be right is refused before it changes the engine, in a world of one.

- Another optimizer's checkpoint (AdamW's into SGD, SGD's into AdamW; by the recorded type, and by the state
  names where a checkpoint from before that has none), naming both and `load_optimizer_states=False`.
- A load between backward and step, or with micro-batches accumulated: the pending gradients would be applied to
  the loaded weights.
- `load_module_strict=False` with no parameter name in common; with some, the others are said by name.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
import zero_core
from zero_core import EngineMisuse
from zero_plugins import ZeroError

pytestmark = [pytest.mark.usefixtures("solo_process_group"),
              pytest.mark.filterwarnings("ignore:torch.distributed is disabled"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _engine(optimizer: str, model: torch.nn.Module | None = None, **params: Any) -> Any:
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": params.pop("accumulation", 1),
              "optimizer": {"type": optimizer, "params": {"lr": 0.1, **params}}, "zero_optimization": {"stage": 2}}
    engine, _, _, _ = zero_core.initialize(model=model if model is not None else _model(), config=config)
    return engine


def _train(engine: Any, steps: int = 1) -> None:
    for _ in range(steps):
        engine.backward(engine(torch.randn(2, 6)).pow(2).mean())
        engine.step()


def _saved(tmp_path: Path, optimizer: str, **params: Any) -> Path:
    engine = _engine(optimizer, **params)
    _train(engine)
    engine.save_checkpoint(tmp_path, "saved")
    engine.destroy()
    return tmp_path


def _snapshot(engine: Any) -> tuple[list[torch.Tensor], list[dict[str, Any]], int]:
    groups = [{k: v for k, v in group.items() if k != "params"} for group in engine.optimizer.param_groups]
    return [p.detach().clone() for p in engine.module.parameters()], groups, len(engine.optimizer.state)


def _unchanged(engine: Any, before: tuple[list[torch.Tensor], list[dict[str, Any]], int]) -> None:
    weights, groups, states = _snapshot(engine)
    assert all(torch.equal(a, b) for a, b in zip(weights, before[0]))
    assert groups == before[1] and states == before[2]


def test_the_checkpoint_records_its_optimizer_type(tmp_path: Path) -> None:
    _saved(tmp_path, "AdamW")
    assert json.loads((tmp_path / "saved" / "zero_checkpoint.json").read_text())["optimizer_type"] == "AdamW"


def _refused_unchanged(engine: Any, tmp_path: Path, message: str) -> None:
    """Loading tmp_path's "saved" tag is refused with `message` (a regex), and nothing of the engine changed."""
    before = _snapshot(engine)
    with pytest.raises(ZeroError, match=message):
        engine.load_checkpoint(tmp_path, "saved")
    _unchanged(engine, before)


@pytest.mark.parametrize(("saved", "saved_params", "loaded", "loaded_params"), [
    ("AdamW", {}, "SGD", {}),
    ("SGD", {"momentum": 0.9}, "AdamW", {}),
    ("Adam", {"adam_w_mode": False}, "AdamW", {}),
])
def test_another_optimizers_state_is_refused_before_any_change(tmp_path: Path, saved: str, saved_params: dict,
                                                               loaded: str, loaded_params: dict) -> None:
    _saved(tmp_path, saved, **saved_params)
    engine = _engine(loaded, **loaded_params)
    _refused_unchanged(engine, tmp_path, rf"holds the optimizer state of {saved}, and this engine's optimizer is "
                                         rf"{loaded}: loading it would step {loaded} with {saved}'s hyperparameters "
                                         r"and state; pass load_optimizer_states=False")
    engine.load_checkpoint(tmp_path, "saved", load_optimizer_states=False)  # the weights alone: trains on
    assert engine.optimizer.param_groups[0]["lr"] == 0.1
    _train(engine)
    assert engine.was_step_applied()


def test_a_checkpoint_without_a_recorded_type_is_compared_by_its_state_names(tmp_path: Path) -> None:
    _saved(tmp_path, "AdamW")
    description = tmp_path / "saved" / "zero_checkpoint.json"
    old = json.loads(description.read_text())
    del old["optimizer_type"]  # as written before the type was recorded, and before manifests
    description.write_text(json.dumps(old))
    (tmp_path / "saved" / "zero_manifest.json").unlink()
    engine = _engine("SGD", momentum=0.9)
    _refused_unchanged(engine, tmp_path, r"holds optimizer state exp_avg, exp_avg_sq \(its optimizer type is not "
                                         r"recorded\), and this engine's optimizer SGD keeps momentum_buffer: it is "
                                         r"another optimizer's; pass load_optimizer_states=False")
    same = _engine("AdamW")
    same.load_checkpoint(tmp_path, "saved")  # the same optimizer's state names: loads
    assert sorted(same.optimizer.state[same.optimizer.groups[0].master.optimizer_params[0]]) == [
        "exp_avg", "exp_avg_sq", "step"]


def test_the_same_optimizer_type_loads_its_state(tmp_path: Path) -> None:
    _saved(tmp_path, "SGD", momentum=0.9)
    engine = _engine("SGD", momentum=0.9)
    engine.load_checkpoint(tmp_path, "saved")
    _train(engine)
    assert engine.global_steps == 2


def test_a_load_between_backward_and_step_is_refused(tmp_path: Path) -> None:
    _saved(tmp_path, "AdamW")
    engine = _engine("AdamW")
    engine.backward(engine(torch.randn(2, 6)).pow(2).mean())
    before = _snapshot(engine)
    with pytest.raises(EngineMisuse, match=r"engine.load_checkpoint\(\) between engine.backward\(\) and engine.step\(\): "
                                           r"that backward's gradients are computed from the weights it replaces, and "
                                           r"the next step would apply them to the loaded ones; call "
                                           r"engine.zero_grad\(\) to discard them"):
        engine.load_checkpoint(tmp_path, "saved")
    _unchanged(engine, before)
    engine.zero_grad()
    engine.load_checkpoint(tmp_path, "saved")
    assert engine.global_steps == 1


def test_a_load_with_accumulated_micro_batches_is_refused_until_the_boundary(tmp_path: Path) -> None:
    _saved(tmp_path, "AdamW")
    engine = _engine("AdamW", accumulation=2)
    _train(engine)  # micro-batch 1 of 2: its gradients are held for the boundary
    with pytest.raises(EngineMisuse, match=r"with the gradients of 1 micro-batch\(es\) accumulated toward the next "
                                           r"optimizer step"):
        engine.load_checkpoint(tmp_path, "saved")
    _train(engine)  # the boundary: applied, nothing held
    engine.load_checkpoint(tmp_path, "saved")
    assert engine.global_steps == 1 and engine.micro_steps == 1


class _Renamed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = torch.nn.Linear(6, 8)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.encoder(x)))


def test_a_non_strict_load_with_no_name_in_common_is_refused(tmp_path: Path) -> None:
    _saved(tmp_path, "AdamW")
    engine = _engine("AdamW", model=_Renamed())
    before = _snapshot(engine)
    with pytest.raises(ZeroError, match=r"has none of this model's 4 parameters, so load_module_strict=False would load "
                                        r"nothing: this model has encoder.weight, encoder.bias, head.weight \(and 1 "
                                        r"more\), the checkpoint 0.weight, 0.bias, 2.weight \(and 1 more\)"):
        engine.load_checkpoint(tmp_path, "saved", load_module_strict=False)
    _unchanged(engine, before)


def test_a_non_strict_load_names_what_it_left_out(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _saved(tmp_path, "AdamW")
    # 0.* in common; 2.* only in the checkpoint, 3.* only in this model
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Identity(), torch.nn.Linear(8, 3))
    engine = _engine("AdamW", model=model)
    kept = model[3].weight.detach().clone()
    with caplog.at_level(logging.WARNING, logger="zero_core.checkpoint"):
        engine.load_checkpoint(tmp_path, "saved", load_module_strict=False)
    where = tmp_path / "saved"
    assert [r.getMessage() for r in caplog.records if r.name == "zero_core.checkpoint"] == [
        f"checkpoint {where} has no 3.weight, 3.bias: they keep their current values (load_module_strict=False)",
        f"checkpoint {where} has 2.weight, 2.bias, which this model lacks: not loaded (load_module_strict=False)"]
    assert torch.equal(model[3].weight, kept)
