"""Checkpoints lose nothing: a save killed mid-way, and checkpoints that must not load.

- A rank is SIGKILLed while a second save is being written (its staging directory already
  has data): the first checkpoint still loads, with its values, and `latest` still names it;
  the next save (of another process) removes the dead save's staging directory.
- Loading a truncated checkpoint (a data file cut short, or its description missing), another
  model's (a parameter with another shape, a parameter missing), or a tag that is not there
  fails with one error naming what differs; `load_module_strict=False` loads what both have.
- `exclude_frozen_parameters=True` leaves the frozen base out, and a fresh model's base
  (the base model's weights) is kept on load.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from zero_plugins import ZeroError

from multirank import run_ranks, started_ranks
from tied_lora import HIDDEN, SEQ, VOCAB, TiedLoRA

CONFIG: dict[str, Any] = {
    "train_micro_batch_size_per_gpu": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
    "zero_optimization": {"stage": 2},
}


class Wide(torch.nn.Module):
    """Large enough (12.6M params: 200 MB of weights, master and state across 2 ranks) that a save takes a while."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(2048, 2048) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x.pow(2).mean()


def _step(engine: Any) -> None:
    loss = engine(torch.randn(2, 2048))
    engine.backward(loss)
    engine.step()


def _save_twice(rank: int, world_size: int, save_dir: str) -> None:
    import zero_core

    torch.manual_seed(0)
    engine, _, _, _ = zero_core.initialize(model=Wide(), config=CONFIG)
    _step(engine)
    engine.save_checkpoint(save_dir, tag="first")
    torch.save({k: v.clone() for k, v in engine.module_state_dict().items()}, Path(save_dir) / f"first.rank{rank}.pt")
    _step(engine)
    engine.save_checkpoint(save_dir, tag="second")  # killed in here


def _load_latest(rank: int, world_size: int, save_dir: str) -> dict[str, torch.Tensor]:
    import zero_core

    torch.manual_seed(1)
    engine, _, _, _ = zero_core.initialize(model=Wide(), config=CONFIG)
    path, _ = engine.load_checkpoint(save_dir)
    assert Path(path).name == "first"
    state = {k: v.clone() for k, v in engine.module_state_dict().items()}
    _step(engine)
    engine.save_checkpoint(save_dir, tag="third", save_latest=False)  # clears what the killed save left
    engine.destroy()
    return state


def test_a_save_killed_midway_leaves_the_previous_checkpoint_and_latest(tmp_path: Path) -> None:
    def staged_data() -> bool:  # rank 0 numbers its saves: the second one's staging directory has data
        return any(f.stat().st_size > 0 for f in tmp_path.glob(".zero-staging-*-2/*.distcp"))

    with started_ranks(_save_twice, 2, str(tmp_path)) as (processes, _):
        deadline = time.monotonic() + 240
        while not staged_data():
            assert time.monotonic() < deadline, "the second save never started writing"
            assert all(p.exitcode is None for p in processes), "a rank ended before the second save"
            time.sleep(0.005)
        os.kill(processes[1].pid, signal.SIGKILL)
        processes[1].join(10)
    assert (tmp_path / "latest").read_text() == "first"
    assert not (tmp_path / "second").exists()
    loaded = run_ranks(_load_latest, 2, str(tmp_path), timeout=240)
    saved = torch.load(tmp_path / "first.rank0.pt")
    for key, value in saved.items():
        assert torch.equal(loaded[0][key], value), key
    assert not list(tmp_path.glob(".zero-staging-*")) and (tmp_path / "third").is_dir()
    assert (tmp_path / "latest").read_text() == "first"


def _async_save_while_training(save_dir: str) -> dict[str, Any]:
    """Save asynchronously, step on at once (the step waits for the snapshot, not the write), then load it back."""
    import zero_core

    torch.manual_seed(0)
    engine, _, _, _ = zero_core.initialize(model=Wide(), config=CONFIG)
    _step(engine)
    at_save = {k: v.clone() for k, v in engine.module_state_dict().items()}
    started = time.perf_counter()
    path = engine.save_checkpoint(save_dir, tag="async", async_save=True)
    returned = time.perf_counter() - started
    for _ in range(2):
        _step(engine)
    published = engine.wait_for_checkpoint()
    waited = time.perf_counter() - started
    moved = any(not torch.equal(v, at_save[k]) for k, v in engine.module_state_dict().items())
    torch.manual_seed(1)
    fresh, _, _, _ = zero_core.initialize(model=Wide(), config=CONFIG)
    fresh.load_checkpoint(save_dir)
    loaded = {k: v.clone() for k, v in fresh.module_state_dict().items()}
    fresh.destroy()
    engine.destroy()
    return {"path": path, "published": published, "returned": returned, "waited": waited, "moved": moved,
            "equal": all(torch.equal(loaded[k], v) for k, v in at_save.items())}


def test_an_asynchronous_save_holds_the_weights_of_its_call_while_training_goes_on(loads: Any) -> None:
    root, _, results = loads
    result, save_dir = results["async"], root / "async-save"
    assert result["path"] == result["published"] == str(save_dir / "async")
    assert result["moved"], "the steps after the save changed the weights"
    assert result["equal"], "the checkpoint holds the weights as they were when save_checkpoint was called"
    assert result["returned"] < result["waited"]
    assert (save_dir / "latest").read_text() == "async"


def _small_config(stage: int) -> dict[str, Any]:
    return {**CONFIG, "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": HIDDEN}}


def _saves(rank: int, world_size: int, root: str) -> dict[str, Any]:
    """`_train_and_save`, and the asynchronous save into `async-save`: one 2-rank spawn, not two."""
    return {"state": _train_and_save(root), "async": _async_save_while_training(str(Path(root) / "async-save"))}


def _train_and_save(root: str) -> dict[str, torch.Tensor]:
    """Save twice at step 1: with everything (`full`), and without the frozen base (`adapters`)."""
    import zero_core

    torch.manual_seed(0)
    engine, _, _, _ = zero_core.initialize(model=TiedLoRA(), config=_small_config(2))
    loss = engine(torch.randint(0, VOCAB, (2, SEQ)))
    engine.backward(loss)
    engine.step()
    engine.save_checkpoint(str(Path(root) / "full"))
    engine.save_checkpoint(str(Path(root) / "adapters"), exclude_frozen_parameters=True)
    state = {k: v.clone() for k, v in engine.module_state_dict().items()}
    engine.destroy()
    return state


class Narrower(TiedLoRA):
    def __init__(self) -> None:
        super().__init__()
        self.down = torch.nn.Linear(2 * HIDDEN, HIDDEN, bias=False)  # no down.bias


class Wider(TiedLoRA):
    def __init__(self) -> None:
        super().__init__()
        self.down = torch.nn.Linear(2 * HIDDEN + 1, HIDDEN)


def _load(model: torch.nn.Module, save_dir: str, stage: int = 2, **kwargs: Any) -> tuple[str, Any]:
    """("loaded", the model's state) or (the error's type and message, None)."""
    import zero_core

    engine, _, _, _ = zero_core.initialize(model=model, config=_small_config(stage))
    try:
        path, _ = engine.load_checkpoint(save_dir, **kwargs)
    except Exception as error:  # noqa: BLE001 - the test reads the message
        return f"{type(error).__name__}: {error}", None
    finally:
        state = {k: v.clone() for k, v in engine.module_state_dict().items()}
        engine.destroy()
    return f"loaded {Path(path).name}", state


def _loads(rank: int, world_size: int, root: str) -> dict[str, tuple[str, Any]]:
    """Every load the tests look at, in one job; the damaging ones last (rank 0 damages the files between them)."""
    import torch.distributed as dist

    full = str(Path(root) / "full")
    torch.manual_seed(0)  # the same base weights as the run that saved: the base model
    results = {"adapters": _load(TiedLoRA(), str(Path(root) / "adapters"), stage=3),
               "missing": _load(Narrower(), full, stage=3),
               "not strict": _load(Narrower(), full, stage=3, load_module_strict=False),
               "tag": _load(TiedLoRA(), full, stage=3, tag="global_step9"),
               "shape": _load(Wider(), full)}
    where = Path(full) / "global_step1"
    data = sorted(where.glob("*.distcp"))[0]
    whole = data.read_bytes()
    results["size"] = (len(whole), None)
    dist.barrier()
    if rank == 0:
        with open(data, "r+b") as file:
            file.truncate(len(whole) // 2)
    dist.barrier()
    results["truncated"] = _load(TiedLoRA(), full)
    dist.barrier()
    if rank == 0:  # one damage at a time: the data file whole again, the description gone
        data.write_bytes(whole)
        (where / "zero_checkpoint.json").unlink()
    dist.barrier()
    results["no description"] = _load(TiedLoRA(), full)
    return results


@pytest.fixture(scope="module")
def loads(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor], dict[str, Any]]:
    root = tmp_path_factory.mktemp("small")
    saves = run_ranks(_saves, 2, str(root), timeout=300)[0]
    return root, saves["state"], {"async": saves["async"], **run_ranks(_loads, 2, str(root), timeout=240)[0]}


def test_checkpoints_of_other_models_and_missing_tags_fail_with_one_error(loads: Any) -> None:
    root, _, results = loads
    full, where = root / "full", root / "full" / "global_step1"
    assert results["missing"][0] == (f"ZeroError: checkpoint {where} is of another model: this model has no "
                                     "down.bias; pass load_module_strict=False to load the parameters both have")
    assert results["not strict"][0] == "loaded global_step1"
    assert results["tag"][0] == f"ZeroError: checkpoint tag 'global_step9' is not in {full} (tags there: global_step1)"
    assert results["shape"][0] == (f"ZeroError: checkpoint {where} is of another model: down.weight has shape "
                                   "(32, 64) there, (32, 65) here")


def test_a_truncated_file_and_a_missing_description_fail(loads: Any) -> None:
    root, _, results = loads
    where = root / "full" / "global_step1"
    truncated = results["truncated"][0]
    size = results["size"][0]
    assert truncated == (f"CheckpointError: checkpoint {where} is damaged: __0_0.distcp is {size // 2} bytes, "
                         f"zero_manifest.json records {size} (the file was cut short or replaced); load an earlier "
                         "tag, or save again")
    assert results["no description"][0] == (
        f"CheckpointError: checkpoint {where} is damaged: zero_checkpoint.json is missing (the manifest "
        "zero_manifest.json records it); load an earlier tag, or save again")


def test_frozen_parameters_can_be_left_out_and_come_from_the_base_model(loads: Any) -> None:
    root, saved, results = loads
    description = (root / "adapters" / "global_step1" / "zero_checkpoint.json").read_text()
    assert '"up.base.weight"' not in description and '"up.lora_a.weight"' in description
    outcome, state = results["adapters"]
    assert outcome == "loaded global_step1"
    for key, value in saved.items():
        assert torch.equal(state[key], value), key


pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")
