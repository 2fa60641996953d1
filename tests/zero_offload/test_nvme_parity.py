"""Parity: optimizer state on NVMe trains exactly like CPU offload, step by step, bit for bit.

The same two-rank runs as test_offload_parity.py's, once with `offload_optimizer: cpu` and
once with `nvme` under a directory where O_DIRECT works. Sub-groups are cut the same way in
both, and the CPU optimizer is the same, so losses, final weights and the optimizer state
read back from the swap files must be equal, not close. Cases cover stages 1-3, bf16,
accumulation, many sub-groups with read-ahead and write-behind, too few buffers to pipeline,
NVMe optimizer state beside CPU-offloaded parameters at stage 3, and the default sub_group_size,
where NVMe cuts the master into budget slices finer than CPU offload's sub-groups (zero-offload's
optimizers step each element alone, so the cut changes no bit; at stage 3 this model's unit shards
are a slice each: test_nvme_default_budget.py cuts one at stage 3).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from multirank import run_ranks
from swap_helpers import direct_directory
from test_offload_parity import ds_config, train_steps
from tied_lora import TiedLoRA

NVME_CASES: dict[str, dict[str, Any]] = {
    "stage1-fp32": {"stage": 1},
    "stage2-bf16-accum": {"stage": 2, "bf16": True, "accum": 2},
    "stage2-subgroups-pipelined": {"stage": 2, "sub_group_size": 300, "buffers": 9, "pipeline": True},
    "stage2-subgroups-serial": {"stage": 2, "sub_group_size": 300, "buffers": 3, "pipeline": False},
    "stage3-fp32-subgroups": {"stage": 3, "sub_group_size": 300, "buffers": 6, "pipeline": True},
    "stage3-params-on-cpu-bf16": {"stage": 3, "bf16": True, "params": "cpu"},
    "stage3-both-on-nvme-fp32": {"stage": 3, "params": "nvme", "max_in_cpu": 0, "buffers": 9, "pipeline": True,
                                 "prefetch": 1200},
    "stage3-both-on-nvme-bf16-split": {"stage": 3, "bf16": True, "params": "nvme", "max_in_cpu": 1500, "accum": 2},
    # the default sub_group_size: CPU offload steps whole tensors, NVMe 1024-element budget slices (4 KiB blocks)
    "stage2-default-sub-group-sliced": {"stage": 2, "aio_block": 4096, "buffers": 6, "pipeline": True},
}


def _config(case: dict[str, Any], device: str, nvme_path: str) -> dict[str, Any]:
    """`device` is where the optimizer state goes, and the parameters when the case offloads them to nvme."""
    block: dict[str, Any] = {"device": device}
    if device == "nvme":
        block.update(nvme_path=nvme_path, buffer_count=case.get("buffers", 4),
                     pipeline_read=case.get("pipeline", False), pipeline_write=case.get("pipeline", False))
    offload: dict[str, Any] = {"offload_optimizer": block}
    if case.get("params") == "cpu" or (case.get("params") == "nvme" and device == "cpu"):
        offload["offload_param"] = {"device": "cpu"}
    elif case.get("params") == "nvme":
        offload["offload_param"] = {"device": "nvme", "nvme_path": nvme_path, "buffer_count": 3,
                                    "buffer_size": 4096, "max_in_cpu": case["max_in_cpu"]}
    config = ds_config({**case, "offload": offload}, offload=True)
    if "aio_block" in case:
        config["aio"] = {"block_size": case["aio_block"]}
    if "prefetch" in case:  # a window smaller than the model: later partitions are read ahead, not gathered
        config["zero_optimization"]["stage3_prefetch_bucket_size"] = case["prefetch"]
    return config


def _train(rank: int, world_size: int, case: dict[str, Any], device: str, nvme_path: str) -> dict[str, Any]:
    import zero_core

    torch.manual_seed(7)
    engine, _, _, _ = zero_core.initialize(model=TiedLoRA(), config=_config(case, device, nvme_path))
    losses = train_steps(engine, case, rank, world_size)
    state = {name: value.float() for name, value in engine.module_state_dict().items()}
    files = sorted(str(p.relative_to(nvme_path)) for p in Path(nvme_path).rglob("*.swp"))
    engine.destroy()
    runs = {Path(nvme_path) / file.split("/")[0] for file in files}
    left = [str(p) for run in runs for p in (run / f"rank{rank}", run / f"rank{rank}.lock") if p.exists()]
    return {"losses": losses, "state": state, "files": files, "left": left}


def _all(rank: int, world_size: int, root: str) -> dict[str, dict[str, Any]]:
    out = {}
    for name, case in NVME_CASES.items():
        path = str(Path(root) / name)
        out[name] = {"cpu": _train(rank, world_size, case, "cpu", path),
                     "nvme": _train(rank, world_size, case, "nvme", path)}
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Any:
    for root in direct_directory(tmp_path_factory.mktemp("nvme")):
        yield run_ranks(_all, 2, str(root), timeout=300)


@pytest.mark.parametrize("name", NVME_CASES)
def test_nvme_equals_cpu_offload_bit_for_bit(results: Any, name: str) -> None:
    for rank_results in results:
        cpu, nvme = rank_results[name]["cpu"], rank_results[name]["nvme"]
        assert nvme["losses"] == cpu["losses"]
        for key, value in cpu["state"].items():
            assert torch.equal(nvme["state"][key], value), key


@pytest.mark.parametrize("name", NVME_CASES)
def test_swap_files_name_rank_and_kind_and_are_removed_at_destroy(results: Any, name: str) -> None:
    for rank, rank_results in enumerate(results):
        nvme = rank_results[name]["nvme"]
        assert nvme["files"], "no swap files were written"
        for file in nvme["files"]:
            run, owner, kind, _ = file.split("/")
            assert run.startswith("zero-run-") and owner in ("rank0", "rank1")
            assert kind in ("optim.master", "optim.state", "param.partition")
        kinds = {f.split("/")[2] for f in nvme["files"]}
        assert ("param.partition" in kinds) == (NVME_CASES[name].get("params") == "nvme")
        assert any(f.split("/")[1] == f"rank{rank}" for f in nvme["files"])
        assert {f.split("/")[0] for f in nvme["files"]} == {results[0][name]["nvme"]["files"][0].split("/")[0]}
        assert any(f.endswith(".exp_avg_sq.swp") for f in nvme["files"])
        assert nvme["left"] == []


def test_the_default_sub_group_is_swapped_in_budget_slices(results: Any) -> None:
    for rank_results in results:
        files = rank_results["stage2-default-sub-group-sliced"]["nvme"]["files"]
        assert any(".sub1." in file for file in files), files
