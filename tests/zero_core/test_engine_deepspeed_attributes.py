"""The engine attributes every DeepSpeed training loop reads, at stages 0-3, with DeepSpeed's values.

DeepSpeed 0.19.8's engine defines them as: `global_rank = dist.get_rank()`, `world_size =
dist.get_world_size()`, `local_rank = int(os.environ["LOCAL_RANK"])`; `micro_steps` counts
every `step()` call, `global_steps` and `global_samples` (`+= train_batch_size()`) count
boundaries; `was_step_applied()` is True only after a `step()` that updated the weights;
`fp16_enabled()`, `bfloat16_enabled()` and `gradient_clipping()` echo the config.
`save_16bit_model` writes the module's state_dict (rank 0, torch.save) and returns True at stages
0-2; at stage 3 without `stage3_gather_16bit_weights_on_model_save` it writes nothing and returns
False, as DeepSpeed does, with a WARNING naming that setting (test_checkpoint_export.py saves with it). `load_checkpoint` of a directory without a
checkpoint must say that, not fall through to the model.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from zero_plugins import ZeroError

from engine_helpers import WarningRecords
from multirank import run_ranks

WORLD_SIZE = 2
STAGES = (0, 1, 2, 3)


def _config(stage: int) -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "gradient_clipping": 0.5,
            "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}


def _attributes(rank: int, world_size: int, root: str) -> dict[int, dict[str, Any]]:
    import torch.distributed as dist
    import zero_core

    found: dict[int, dict[str, Any]] = {}
    for stage in STAGES:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
        engine, _, _, _ = zero_core.initialize(model=model, config=_config(stage))
        applied = []
        for _ in range(4):
            loss = engine(torch.randn(2, 4, dtype=torch.bfloat16)).float().pow(2).mean()
            engine.backward(loss)
            engine.step()
            applied.append(engine.was_step_applied())
        errors = {}
        warnings = WarningRecords()
        logging.getLogger("zero_core.engine").addHandler(warnings)
        try:
            saved = engine.save_16bit_model(f"{root}/stage{stage}")
        finally:
            logging.getLogger("zero_core.engine").removeHandler(warnings)
        state = engine.module_state_dict()
        try:
            engine.load_checkpoint("/nonexistent/checkpoints")
        except ZeroError as error:
            errors["load_checkpoint"] = str(error)
        try:
            engine.no_such_attribute  # noqa: B018
        except AttributeError as error:
            errors["missing"] = str(error)
        found[stage] = {
            "global_rank": (engine.global_rank, dist.get_rank()),
            "local_rank": (engine.local_rank, int(os.environ["LOCAL_RANK"])),
            "world_size": (engine.world_size, dist.get_world_size()),
            "micro_steps": engine.micro_steps,
            "global_steps": engine.global_steps,
            "global_samples": engine.global_samples,
            "applied": applied,
            "fp16": engine.fp16_enabled(),
            "bf16": engine.bfloat16_enabled(),
            "clipping": engine.gradient_clipping(),
            "stage": engine.zero_optimization_stage(),
            "errors": errors,
            "saved_16bit": (saved, state),
            "warnings": warnings.messages,
        }
        engine.destroy()
    return found


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("save_16bit")


@pytest.fixture(scope="module")
def attributes(root: Path) -> list[dict[int, dict[str, Any]]]:
    return run_ranks(_attributes, WORLD_SIZE, str(root), timeout=180)


@pytest.mark.parametrize("stage", STAGES)
def test_identity_attributes_match_torch_distributed(attributes, stage: int) -> None:  # type: ignore[no-untyped-def]
    for rank, result in enumerate(attributes):
        values = result[stage]
        for name in ("global_rank", "local_rank", "world_size"):
            mine, deepspeeds = values[name]
            assert mine == deepspeeds, name
        assert values["global_rank"][0] == rank


@pytest.mark.parametrize("stage", STAGES)
def test_counters_and_step_applied(attributes, stage: int) -> None:  # type: ignore[no-untyped-def]
    values = attributes[0][stage]
    assert values["micro_steps"] == 4
    assert values["global_steps"] == 2, "two accumulation boundaries in four micro-batches"
    assert values["global_samples"] == 2 * (2 * 2 * WORLD_SIZE), "train_batch_size per boundary"
    assert values["applied"] == [False, True, False, True]
    assert values["stage"] == stage


@pytest.mark.parametrize("stage", STAGES)
def test_config_echoes(attributes, stage: int) -> None:  # type: ignore[no-untyped-def]
    values = attributes[0][stage]
    assert (values["fp16"], values["bf16"], values["clipping"]) == (False, True, 0.5)


@pytest.mark.parametrize("stage", STAGES)
def test_failing_checkpoint_calls_say_so_and_missing_names_name_both_objects(
        attributes, stage: int) -> None:  # type: ignore[no-untyped-def]
    errors = attributes[0][stage]["errors"]
    assert errors["load_checkpoint"] == ("no checkpoint to load in /nonexistent/checkpoints: it does not exist; "
                                         "pass the save_dir given to save_checkpoint")
    assert errors["missing"] == ("neither the ZeroEngine nor its model (Sequential) has an attribute "
                                 "'no_such_attribute'")


@pytest.mark.parametrize("stage", STAGES)
def test_save_16bit_model_writes_the_state_dict_or_names_the_stage_3_setting(
        attributes, root: Path, stage: int) -> None:  # type: ignore[no-untyped-def]
    path = root / f"stage{stage}" / "pytorch_model.bin"
    if stage == 3:
        assert [result[stage]["saved_16bit"][0] for result in attributes] == [False] * WORLD_SIZE, "DeepSpeed's False"
        assert attributes[0][stage]["warnings"] == [
            "engine.save_16bit_model wrote nothing: at stage 3 it gathers the partitioned weights only with "
            "zero_optimization.stage3_gather_16bit_weights_on_model_save: true; set it, or save a checkpoint and "
            "run `zero checkpoint export`"]
        assert attributes[1][stage]["warnings"] == [], "said once, by rank 0"
        assert not path.parent.exists(), "nothing written"
        return
    assert [result[stage]["saved_16bit"][0] for result in attributes] == [True] * WORLD_SIZE
    state = attributes[0][stage]["saved_16bit"][1]
    saved = torch.load(path)
    assert saved.keys() == state.keys() == {"0.weight", "0.bias", "1.weight", "1.bias"}
    for name, value in state.items():
        assert value.dtype == torch.bfloat16 and torch.equal(saved[name], value), name
