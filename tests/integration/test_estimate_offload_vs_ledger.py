"""zero-estimate's offload lines equal the engine's ledger byte for byte: location, category, pinned or not.

Real engines on 2 gloo ranks, with the `native` pin backend so that pinning is real here (it
locks pages with mlock on a machine without an accelerator). The estimate is made from the
live module (`from_module`), so it knows the buckets and units the engine cuts:
- stages 1-2: reduce buckets of `reduce_bucket_size` elements, cut in reverse parameter order;
- stage 3: one unit per module and param group above the persistence threshold, the small
  trainable params in buckets, and the frozen layer's unit on its own.
The sizes are odd, so every buffer is padded to the 2 ranks, and the pinned buffers are
rounded up to whole pages: both must come out the same on each side.

NVMe cases (zero-offload's `nvme` device, swap files in a directory where O_DIRECT works) use a
second module whose shards span several 4 KiB blocks (tests/zero_estimate/test_nvme_lines.py
computes its figures by hand), with sub_group_size 1500 so that each optimizer shard is cut
into sub-groups: a swap file per sub-group and per state tensor at `nvme`, the step counts at
`host`, and each swap-buffer pool at `host.pinned` (or `host`, a block larger, unpinned). One case
keeps the default sub_group_size with 4 KiB aio blocks: the shards are cut into the budget's swap
slices of one block (1024 elements) instead.
"""
from __future__ import annotations

import importlib.util
import resource
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")
zero_pin = pytest.importorskip("zero_pin")
pytest.importorskip("zero_offload")

import zero_estimate as ze  # noqa: E402

from multirank import run_ranks  # noqa: E402

WORLD = 2
PAGE = resource.getpagesize()
BUCKET = 2500  # stages 1-2: the 4 trainable params fill 2 buckets (2047 and 2079 elements)
THRESHOLD = 100  # stage 3: the biases stay whole; the weights form units

OPTIMIZER = {"offload_optimizer": {"device": "cpu"}}
PARAM = {"offload_param": {"device": "cpu"}}
UNPINNED = {"offload_optimizer": {"device": "cpu", "pin_memory": False},
            "offload_param": {"device": "cpu", "pin_memory": False}}
# name: (stage, offload blocks, gradient accumulation steps)
CASES: dict[str, tuple[int, dict[str, Any], int]] = {
    "stage1-optimizer": (1, OPTIMIZER, 1),
    "stage2-optimizer": (2, OPTIMIZER, 1),
    "stage2-optimizer-accumulating": (2, OPTIMIZER, 2),
    "stage3-optimizer": (3, OPTIMIZER, 1),
    "stage3-param": (3, PARAM, 1),
    "stage3-optimizer-and-param": (3, {**OPTIMIZER, **PARAM}, 1),
    "stage3-unpinned": (3, UNPINNED, 1),
}
HOST = ("host", "host.pinned")

NVME_BUCKET = 8000  # the NVMe module's 4 trainable params fill buckets of 4807 and 6005 elements
NVME_THRESHOLD = 1000  # stage 3: the biases of "2" and "4" stay whole; the rest form units
SUB_GROUP = 1500  # below every shard's partition (5,406 elements), so the shards are cut into sub-groups
NVME_OPTIMIZER = {"offload_optimizer": {"device": "nvme", "buffer_count": 4}}
NVME_PIPELINED = {"offload_optimizer": {"device": "nvme", "buffer_count": 6, "pipeline_read": True,
                                        "pipeline_write": True}}
# 3603 of the 16-bit unit shards' elements fit in max_in_cpu; the units after it (1802 and the frozen 602) go
NVME_PARAM = {"offload_param": {"device": "nvme", "buffer_count": 5, "buffer_size": 2000, "max_in_cpu": 5000}}
NVME_UNPINNED = {"offload_optimizer": {**NVME_OPTIMIZER["offload_optimizer"], "pin_memory": False},
                 "offload_param": {**NVME_PARAM["offload_param"], "pin_memory": False}}
# How the optimizer's swap slices are cut: sub_group_size and aio.block_size. SUB_GROUPS: as above, below the
# budget's slice (one 1 MiB block); BUDGET_SLICES: the default sub_group_size, with slices of one 4 KiB block.
SUB_GROUPS = {"sub_group_size": SUB_GROUP, "aio_block_size": 2**20}
BUDGET_SLICES = {"sub_group_size": 10**9, "aio_block_size": 4096}
# name: (stage, offload blocks, slicing); nvme_path is filled in when the engines run
NVME_CASES: dict[str, tuple[int, dict[str, Any], dict[str, int]]] = {
    "nvme-stage1-optimizer": (1, NVME_OPTIMIZER, SUB_GROUPS),
    "nvme-stage2-optimizer-pipelined": (2, NVME_PIPELINED, SUB_GROUPS),
    "nvme-stage2-optimizer-budget-slices": (2, NVME_OPTIMIZER, BUDGET_SLICES),
    "nvme-stage3-optimizer": (3, NVME_OPTIMIZER, SUB_GROUPS),
    "nvme-stage3-param": (3, NVME_PARAM, SUB_GROUPS),
    "nvme-stage3-optimizer-and-param": (3, {**NVME_PIPELINED, **NVME_PARAM}, SUB_GROUPS),
    "nvme-stage3-unpinned": (3, NVME_UNPINNED, SUB_GROUPS),
}
NVME_WHERE = ("host", "host.pinned", "nvme")


def _model() -> Any:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(33, 63), torch.nn.GELU(), torch.nn.Linear(63, 31), torch.nn.GELU(),
                                torch.nn.Linear(31, 17))
    model[4].requires_grad_(False)  # a frozen layer: no optimizer state, but its own unit at stage 3
    return model


def _nvme_model() -> Any:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 1201), torch.nn.GELU(), torch.nn.Linear(1201, 3),
                                torch.nn.GELU(), torch.nn.Linear(3, 401))
    model[4].requires_grad_(False)  # frozen, and a unit of its own at stage 3: with param NVMe, past max_in_cpu
    return model


def _config(stage: int, offload: dict[str, Any], accum: int) -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": accum, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": stage, "reduce_bucket_size": BUCKET,
                                  "stage3_param_persistence_threshold": THRESHOLD, **offload}}


def _ledgers(rank: int, world_size: int) -> dict[str, dict[str, dict[str, int]]]:
    import zero_core

    found = {}
    for name, (stage, offload, accum) in CASES.items():
        engine, _, _, _ = zero_core.initialize(model=_model(), config=_config(stage, offload, accum))
        for _ in range(accum):
            loss = engine(torch.randn(2, 33, dtype=torch.bfloat16)).float().pow(2).mean()
            engine.backward(loss)
            engine.step()
        report = engine.memory_report()
        found[name] = {where: {category: figures["current"] for category, figures in rows.items()
                               if category != "total"}
                       for where, rows in report.items()}
        engine.destroy()
    return found


def _estimate(stage: int, offload: dict[str, Any], accum: int) -> ze.Estimate:
    optimizer = offload.get("offload_optimizer", {"device": "none"})
    param = offload.get("offload_param", {"device": "none"})
    zero = ze.ZeroSettings(stage=stage, offload_optimizer=optimizer["device"], offload_param=param["device"],
                           reduce_bucket_size=BUCKET, stage3_param_persistence_threshold=THRESHOLD,
                           pin_memory=optimizer.get("pin_memory", param.get("pin_memory", True)))
    training = ze.Training(precision="bf16", optimizer="adamw", micro_batch=2, grad_accum=accum)
    return ze.estimate(ze.from_module(_model()), ze.Cluster(WORLD, page_size=PAGE), training, zero)


def _nvme_config(stage: int, offload: dict[str, Any], slicing: dict[str, int], nvme_path: str) -> dict[str, Any]:
    blocks = {key: {**block, "nvme_path": nvme_path} for key, block in offload.items()}
    config = _config(stage, blocks, 1)
    config["zero_optimization"].update(reduce_bucket_size=NVME_BUCKET, sub_group_size=slicing["sub_group_size"],
                                       stage3_param_persistence_threshold=NVME_THRESHOLD)
    config["aio"] = {"block_size": slicing["aio_block_size"]}
    return config


def _nvme_estimate(stage: int, offload: dict[str, Any], slicing: dict[str, int]) -> ze.Estimate:
    optimizer = offload.get("offload_optimizer", {"device": "none"})
    param = offload.get("offload_param", {"device": "none"})
    zero = ze.ZeroSettings(
        stage=stage, offload_optimizer=optimizer["device"], offload_param=param["device"],
        reduce_bucket_size=NVME_BUCKET, stage3_param_persistence_threshold=NVME_THRESHOLD, **slicing,
        pin_memory=optimizer.get("pin_memory", param.get("pin_memory", True)),
        optimizer_buffer_count=optimizer.get("buffer_count", 4), param_buffer_count=param.get("buffer_count", 5),
        param_buffer_size=param.get("buffer_size", 100_000_000), param_max_in_cpu=param.get("max_in_cpu", 10**9))
    training = ze.Training(precision="bf16", optimizer="adamw", micro_batch=2)
    return ze.estimate(ze.from_module(_nvme_model()), ze.Cluster(WORLD, page_size=PAGE), training, zero)


def _nvme_ledgers(rank: int, world_size: int, nvme_path: str) -> dict[str, dict[str, dict[str, int]]]:
    import zero_core

    found = {}
    for name, (stage, offload, slicing) in NVME_CASES.items():
        config = _nvme_config(stage, offload, slicing, nvme_path)
        engine, _, _, _ = zero_core.initialize(model=_nvme_model(), config=config)
        loss = engine(torch.randn(2, 5, dtype=torch.bfloat16)).float().pow(2).mean()
        engine.backward(loss)
        engine.step()  # the optimizer state (and its swap files) exists from the first step on
        found[name] = {where: {category: figures["current"] for category, figures in rows.items()
                               if category != "total"}
                       for where, rows in engine.memory_report().items()}
        engine.destroy()
    return found


def _swap_helpers() -> ModuleType:
    """tests/zero_offload/swap_helpers.py, loaded by path: that folder is on sys.path only once pytest has
    collected a test there, and its name would clash with the zero_offload package from tests/."""
    if "swap_helpers" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "zero_offload" / "swap_helpers.py"
        spec = importlib.util.spec_from_file_location("swap_helpers", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["swap_helpers"] = module
        spec.loader.exec_module(module)
    return sys.modules["swap_helpers"]


def _native_backend() -> None:
    try:
        zero_pin.get_backend("native")  # built once here; the spawned ranks load it
    except Exception as error:  # noqa: BLE001 - any reason the op cannot build or load here
        pytest.skip(f"the native pin backend is not available here: {error}")


@pytest.fixture(scope="module")
def ledgers() -> list[dict[str, dict[str, dict[str, int]]]]:
    _native_backend()
    return run_ranks(_ledgers, WORLD, timeout=300, env={"DS_PIN_MEMORY_BACKEND": "native"})


@pytest.fixture(scope="module")
def nvme_ledgers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, dict[str, dict[str, int]]]]]:
    _native_backend()
    for root in _swap_helpers().direct_directory(tmp_path_factory.mktemp("nvme")):
        yield run_ranks(_nvme_ledgers, WORLD, str(root), timeout=300, env={"DS_PIN_MEMORY_BACKEND": "native"})


@pytest.mark.parametrize("name", list(CASES))
def test_host_lines_equal_the_ledger_byte_for_byte(ledgers, name: str) -> None:  # type: ignore[no-untyped-def]
    estimate = _estimate(*CASES[name])
    assert sum(ledgers[0][name]["host.pinned" if CASES[name][1] is not UNPINNED else "host"].values()) > 0
    for rank, found in enumerate(ledgers):
        for where in HOST:
            expected = {category: nbytes for category, nbytes in found[name].get(where, {}).items() if nbytes}
            # after a step: every offloaded copy is alive, and the model-load line (init only) is not
            assert estimate.by_category(where, "step", per_rank=True) == expected, (rank, where)
    # pinned: only the ends of device transfers, the fp32 gradients and the 16-bit partitions
    assert {line.category for line in estimate.at("host.pinned")} <= {"grad.partition", "optim.grad", "param.partition"}


def test_nothing_of_the_optimizer_stays_on_the_device(ledgers) -> None:  # type: ignore[no-untyped-def]
    for name, (_, offload, _) in CASES.items():
        if "offload_optimizer" not in offload:
            continue
        device = ledgers[0][name]["cpu"]  # the CPU accelerator's device memory
        assert not {category for category in device if category.startswith("optim.")}, name
        gpu = _estimate(*CASES[name]).by_category("gpu", "step")
        assert not {category for category in gpu if category.startswith("optim.")}, name


@pytest.mark.parametrize("name", list(NVME_CASES))
def test_nvme_lines_equal_the_ledger_byte_for_byte(nvme_ledgers, name: str) -> None:  # type: ignore[no-untyped-def]
    estimate = _nvme_estimate(*NVME_CASES[name])
    assert sum(nvme_ledgers[0][name]["nvme"].values()) > 0
    for rank, found in enumerate(nvme_ledgers):
        for where in NVME_WHERE:
            expected = {category: nbytes for category, nbytes in found[name].get(where, {}).items() if nbytes}
            assert estimate.by_category(where, "step", per_rank=True) == expected, (rank, where)


def test_each_nvme_swap_pool_is_one_line_and_the_ledger_sums_them(nvme_ledgers) -> None:  # type: ignore[no-untyped-def]
    estimate = _nvme_estimate(*NVME_CASES["nvme-stage3-optimizer-and-param"])
    pools = [line.bytes for line in estimate.lines if line.category == "swap.buffer"]
    # param: 5 x blocks(2 * 2000); optimizer: 6 x blocks(4 * 1500)
    assert pools == [5 * 4096, 6 * 8192]
    assert nvme_ledgers[0]["nvme-stage3-optimizer-and-param"]["host.pinned"]["swap.buffer"] == sum(pools)


def test_the_default_nvme_sub_group_is_cut_into_one_block_slices(nvme_ledgers) -> None:  # type: ignore[no-untyped-def]
    found = nvme_ledgers[0]["nvme-stage2-optimizer-budget-slices"]
    assert found["host"]["optim.state"] == 6 * 4  # step counts: 2404 = 1024 + 1024 + 356, 3003 = 1024 + 1024 + 955
    assert found["host.pinned"]["swap.buffer"] == 4 * 4096


def test_nothing_of_the_nvme_optimizer_stays_on_the_device(nvme_ledgers) -> None:  # type: ignore[no-untyped-def]
    for name, (_, offload, _) in NVME_CASES.items():
        if "offload_optimizer" in offload:
            assert not {c for c in nvme_ledgers[0][name]["cpu"] if c.startswith("optim.")}, name


def test_the_estimates_locations_are_the_ledgers() -> None:
    from zero_core.memory import Placement, location

    ledger = {location(placement, "cuda", pinned) for placement in (Placement.HOST, Placement.NVME)
              for pinned in (False, True)}
    assert ledger == set(ze.LOCATIONS) - {"gpu"}  # "gpu" stands for the device-type location ("cuda", "cpu")
