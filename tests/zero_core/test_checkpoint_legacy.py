"""Checkpoints written by an earlier zero still load, exactly: tests/zero_core/data/legacy_checkpoints/.

Each case there was saved on 2 ranks after 2 steps (bf16 compute, AdamW, WarmupLR) by the commit its
expected.json names: stage 2, stage 3, and stage 3 with the optimizer and the parameters offloaded to
CPU (tests/legacy_checkpoints.py defines them; make_legacy_checkpoints.py wrote them, by hand: no test
regenerates them). Copied into tmp_path (nothing in the repository is written), each is loaded into a
fresh engine of its recorded ds_config on 2 ranks, and the stage-3 ones also resharded (stage 3 on 1
rank, stage 2 on 2 ranks and on 1 rank). Then:

- the module's weights and buffer, the fp32 master, Adam's exp_avg and exp_avg_sq, the optimizer's step
  count, the counters, the learning rate and client_state equal what was saved, bit for bit (the master
  and the optimizer state read back by saving the engine again: no call into how the engine holds them);
- the loss of one more step equals the recorded one exactly on 2 ranks: it is the forward of the loaded
  bf16 weights on the same micro-batches, whatever the engine does between steps;
- the fp32 master after that step is within STEP_ATOL of the recorded one. Today's engine gives it
  exactly on 2 ranks, but gradients computed or reduced otherwise (the coming fp32 gradient partitions;
  1 rank's one backward over the whole batch) legitimately move Adam's update a little, while a step
  from an optimizer state that was not loaded misses by about the learning rate. Measured on the stage-3
  case: 4.5e-5 at most on 1 rank, 7.2e-5 with every gradient scaled by 1 + 2^-7; with
  load_optimizer_states=False, 3.3e-3 median and 99% of the elements past 1e-4.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from zero_core.checkpoint import SavedCheckpoint

from legacy_checkpoints import (
    CASES, DATA, EXPECTED, WORLD_SIZE, decode_fp32, load_and_step, read_training, resharded_config, sha256,
)
from multirank import run_ranks

# load name -> (case, stage and world size to load at; None: the case's own ds_config on WORLD_SIZE ranks)
LOADS: dict[str, tuple[str, tuple[int, int] | None]] = {
    **{name: (name, None) for name in CASES},
    "stage3-at-1rank": ("stage3", (3, 1)),
    "stage3-as-stage2": ("stage3", (2, 2)),
    "stage3-cpu-offload-as-stage2-1rank": ("stage3-cpu-offload", (2, 1)),
}
STEP_ATOL = 2e-4  # of the fp32 master after the next step (module docstring); its lr is 5.5e-3


def _expected(case: str) -> dict[str, Any]:
    expected: dict[str, Any] = json.loads((DATA / case / EXPECTED).read_text())
    return expected


def _world_size(load: str) -> int:
    at = LOADS[load][1]
    return at[1] if at else WORLD_SIZE


def _plan(root: Path, world_size: int) -> list[tuple[str, dict[str, Any], str, str, torch.Tensor]]:
    """(load name, ds_config, save_dir, scratch directory, next batch) of each load at `world_size`."""
    plan = []
    for load, (case, at) in LOADS.items():
        if _world_size(load) == world_size:
            expected = _expected(case)
            config = resharded_config(expected["ds_config"], *at) if at else expected["ds_config"]
            plan.append((load, config, str(root / "data" / case), str(root / "scratch" / load),
                         torch.tensor(expected["next_batch"])))
    return plan


def _load_all(rank: int, world_size: int, plan: list[tuple[str, dict[str, Any], str, str, torch.Tensor]]
              ) -> dict[str, dict[str, Any]]:
    """(A rank) every load of the plan, one after the other in one job."""
    return {load: load_and_step(rank, world_size, config, save_dir, scratch, batch)
            for load, config, save_dir, scratch, batch in plan}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the committed cases (tmp/data) and, per load, what the engine saved again (tmp/scratch/<load>)."""
    root = tmp_path_factory.mktemp("legacy")
    shutil.copytree(DATA, root / "data")
    return root


@pytest.fixture(scope="module")
def results(root: Path) -> dict[str, dict[str, Any]]:
    """Rank 0's result (tests/legacy_checkpoints.py:load_and_step) of every load, by name."""
    results: dict[str, dict[str, Any]] = {}
    for world_size in (WORLD_SIZE, 1):
        results.update(run_ranks(_load_all, world_size, _plan(root, world_size), timeout=300)[0])
    return results


def _differences(observed: dict[str, torch.Tensor], expected: dict[str, str], committed: SavedCheckpoint) -> list[str]:
    """The keys whose values' hash is not the recorded one, each with how far it is from the committed data."""
    def how_far(key: str, value: torch.Tensor) -> str:
        if key not in committed.tensors:
            return f"{key} (not in the committed checkpoint)"
        saved = committed.read(key)
        if saved.shape != value.shape:
            return f"{key} ({value.numel()} elements, {saved.numel()} saved)"
        return f"{key} (max |difference| {(value.float() - saved.float()).abs().max().item():.3g})"

    return [how_far(key, value) for key, value in sorted(observed.items()) if sha256(value) != expected.get(key)]


@pytest.mark.parametrize("case", CASES)
def test_the_committed_data_is_what_was_recorded(case: str, root: Path) -> None:
    """The files and the reader are intact, so that a failure below is the engine's."""
    expected = _expected(case)
    committed = SavedCheckpoint.open(root / "data" / case)
    assert committed.tag == expected["tag"]
    assert (committed.description.world_size, committed.description.stage) == (WORLD_SIZE, CASES[case][0])
    values = {key: committed.read(key) for key in committed.tensors}
    assert sorted(values) == sorted(expected["sha256"])
    assert _differences(values, expected["sha256"], committed) == []


@pytest.mark.parametrize("load", LOADS)
def test_loading_restores_the_saved_state_exactly(load: str, root: Path, results: dict[str, dict[str, Any]]) -> None:
    case = LOADS[load][0]
    expected, result = _expected(case), results[load]
    committed = SavedCheckpoint.open(root / "data" / case)
    assert result["client_state"] == expected["client_state"]
    assert result["global_steps"] == expected["counters"]["global_steps"]
    assert result["lr"] == expected["lr"]
    # The module's weights (compute dtype) and buffer; a tied name must still be the tensor it is saved under.
    tied, buffers = committed.description.tied, committed.description.buffers
    for alias, name in tied.items():
        assert torch.equal(result["module"][alias], result["module"][name]), f"{alias} is no longer {name}"
    module = {f"{'buffer' if name in buffers else 'model'}.{name}": value
              for name, value in result["module"].items() if name not in tied}
    assert sorted(module) == sorted(key for key in expected["sha256"] if key.startswith(("model.", "buffer.")))
    assert _differences(module, expected["sha256"], committed) == []
    # The fp32 master and the optimizer state, as this engine saves them again right after loading.
    loaded = SavedCheckpoint.open(root / "scratch" / load, "loaded")
    state = {key: loaded.read(key) for key in loaded.tensors if key.startswith(("master.", "optim."))}
    assert sorted(state) == sorted(key for key in expected["sha256"] if key.startswith(("master.", "optim.")))
    assert _differences(state, expected["sha256"], committed) == []
    training = read_training(root / "scratch" / load / "loaded")
    assert [float(step) for step in training["optimizer_steps"]] == expected["optimizer_steps"]
    assert training["counters"] == expected["counters"]


@pytest.mark.parametrize("load", LOADS)
def test_the_next_step_continues_the_saved_run(load: str, root: Path, results: dict[str, dict[str, Any]]) -> None:
    expected, result = _expected(LOADS[load][0]), results[load]
    if _world_size(load) == WORLD_SIZE:
        assert result["loss"] == expected["next_loss"]
    else:  # one forward over the whole batch, not two halves: other matmul shapes, another mean (equal today)
        assert result["loss"] == pytest.approx(expected["next_loss"], rel=1e-6)
    stepped = SavedCheckpoint.open(root / "scratch" / load, "stepped")
    for name, values in expected["master_after_next_step"].items():
        def where(message: str, name: str = name) -> str:
            return f"master.{name} after the next step: {message}"

        torch.testing.assert_close(stepped.read(f"master.{name}"), decode_fp32(values), rtol=0, atol=STEP_ATOL,
                                   msg=where)
