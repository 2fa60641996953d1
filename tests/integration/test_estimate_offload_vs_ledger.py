"""zero-estimate's offload lines equal the engine's ledger byte for byte: location, category, pinned or not.

Real engines on 2 gloo ranks, with the `native` pin backend so that pinning is real here (it
locks pages with mlock on a machine without an accelerator). The estimate is made from the
live module (`from_module`), so it knows the buckets and units the engine cuts:
- stages 1-2: reduce buckets of `reduce_bucket_size` elements, cut in reverse parameter order;
- stage 3: one unit per module and param group above the persistence threshold, the small
  trainable params in buckets, and the frozen layer's unit on its own.
The sizes are odd, so every buffer is padded to the 2 ranks, and the pinned buffers are
rounded up to whole pages: both must come out the same on each side.
"""
from __future__ import annotations

import resource
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


def _model() -> Any:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(33, 63), torch.nn.GELU(), torch.nn.Linear(63, 31), torch.nn.GELU(),
                                torch.nn.Linear(31, 17))
    model[4].requires_grad_(False)  # a frozen layer: no optimizer state, but its own unit at stage 3
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


@pytest.fixture(scope="module")
def ledgers() -> list[dict[str, dict[str, dict[str, int]]]]:
    try:
        zero_pin.get_backend("native")  # built once here; the spawned ranks load it
    except Exception as error:  # noqa: BLE001 - any reason the op cannot build or load here
        pytest.skip(f"the native pin backend is not available here: {error}")
    return run_ranks(_ledgers, WORLD, timeout=300, env={"DS_PIN_MEMORY_BACKEND": "native"})


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


def test_the_estimates_locations_are_the_ledgers() -> None:
    from zero_core.memory import Placement, location

    ledger = {location(placement, "cuda", pinned) for placement in (Placement.HOST, Placement.NVME)
              for pinned in (False, True)}
    assert ledger == set(ze.LOCATIONS) - {"gpu"}  # "gpu" stands for the device-type location ("cuda", "cpu")
