"""The ds_configs `zero plan --write` writes, loaded by DeepSpeed 0.19.8's own DeepSpeedConfig (skipped where it is
absent: the optional reference environment, `pip install deepspeed==0.19.8`).

One rank on the CPU accelerator over gloo; the data-parallel world size each config was written for is handed to
DeepSpeedConfig through its `mpu` argument (an object with DeepSpeed's get_data_parallel_world_size), so
DeepSpeed itself checks train_batch_size = micro-batch x accumulation x world size.
"""
from __future__ import annotations

import json
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any

import pytest
from zero_estimate import (
    Cluster, Limits, LoraSpec, Training, ZeroSettings, complete_ds_config, estimate, from_preset, plan, save_ds_config,
)

from deepspeed_peer import import_deepspeed
from multirank import run_ranks

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(PathFinder.find_spec("deepspeed") is None,
                       reason="DeepSpeed 0.19.8 is not installed (the reference environment: pip install "
                              "deepspeed==0.19.8)"),
]
WORLD = 4
GIB = 2**30


class _DataParallel:
    """DeepSpeed's model-parallel-unit interface, reduced to the one call DeepSpeedConfig makes of it."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size

    def get_data_parallel_world_size(self) -> int:
        return self.world_size


def _read_in_deepspeed(rank: int, world_size: int, paths: list[str]) -> list[dict[str, Any]]:
    """Each file as DeepSpeed reads it: the values the plan decided, or DeepSpeed's refusal."""
    deepspeed = import_deepspeed()
    deepspeed.init_distributed(dist_backend="gloo")
    from deepspeed.runtime.config import DeepSpeedConfig

    results = []
    for path in paths:
        try:
            config = DeepSpeedConfig(path, mpu=_DataParallel(WORLD))
        except Exception as error:  # DeepSpeed's own refusal, compared below
            results.append({"refused": f"{type(error).__name__}: {error}"})
            continue
        zero = config.zero_config
        checkpointing = config.activation_checkpointing_config
        results.append({
            "batch": [config.train_batch_size, config.train_micro_batch_size_per_gpu,
                      config.gradient_accumulation_steps],
            "fp16": config.float16_config.enabled,
            "bf16": config.bfloat16_config.enabled,
            "stage": int(zero.stage),
            "offload": [str(zero.offload_optimizer.device), str(zero.offload_param.device)],
            "memory_efficient_linear": zero.memory_efficient_linear,
            "number_checkpoints": checkpointing.number_checkpoints,
            "aio_block_size": config.aio_config["block_size"],
        })
    return results


def _written(tmp_path: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every kind of candidate the plan makes for Pythia-6.9B with LoRA on 4 GPUs, written to files."""
    spec = from_preset("pythia-6.9b", lora=LoraSpec(128))
    estimates = []
    for checkpointing in ("none", "full"):
        training = Training(precision="fp16", micro_batch=2, grad_accum=3, checkpointing=checkpointing)
        estimates += [c.estimate for c in plan(spec, Cluster(WORLD), Limits(80 * GIB, nvme=1024 * GIB), training).fits]
    files = []
    for index, e in enumerate(estimates):
        path = tmp_path / f"ds_config_{index}.json"
        save_ds_config(complete_ds_config(e, nvme_path=str(tmp_path)), path)
        files.append((path, {
            "batch": [24, 2, 3], "fp16": True, "bf16": False, "stage": e.zero.stage,
            "offload": [e.zero.offload_optimizer, e.zero.offload_param], "memory_efficient_linear": True,
            "number_checkpoints": 32 if e.training.checkpointing == "full" else None,
            "aio_block_size": 1_048_576,
        }))
    return files


def test_deepspeed_reads_every_written_config_as_the_plan_decided_it(tmp_path: Path) -> None:
    files = _written(tmp_path)
    # zero's own key: DeepSpeed refuses the file as written, and reads it once the listed keys are deleted (the
    # top-level list itself it skips).
    own = complete_ds_config(estimate(from_preset("pythia-6.9b"), Cluster(WORLD), Training(micro_batch=2),
                                      ZeroSettings(stage=3, step_in_backward=True)), {"gradient_clipping": 0})
    assert own.keys_deepspeed_lacks == ["zero_optimization.step_in_backward"]
    as_written, without = tmp_path / "own.json", tmp_path / "own_deleted.json"
    save_ds_config(own, as_written)
    config = json.loads(as_written.read_text())
    del config["zero_optimization"]["step_in_backward"]
    without.write_text(json.dumps(config))
    paths = [str(path) for path, _ in files] + [str(as_written), str(without)]
    *results, refused, read = run_ranks(_read_in_deepspeed, 1, paths, timeout=150, env={"DS_ACCELERATOR": "cpu"})[0]
    assert len(results) == 22
    assert results == [expected for _, expected in files]
    assert "step_in_backward" in refused["refused"] and "Extra inputs are not permitted" in refused["refused"]
    assert (read["stage"], read["batch"], read["bf16"]) == (3, [8, 2, 1], True)
