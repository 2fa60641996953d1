"""The ledger with CPU offload: what moved to the host, what is pinned, and by how much the device shrank.

The pinned volume per rank is a contract (docs/offload.md), checked byte for byte here with
the `native` pin backend (which really locks pages on a machine without an accelerator):
- `offload_optimizer`: the fp32 gradients of the partition, 4 bytes per trainable element
  (reduced gradients are copied into them during backward; at stage 1, at the step);
- `offload_param` (stage 3): plus the 16-bit partitions, 2 bytes per element.
Each pinned buffer is rounded up to whole pages, since mlock locks pages. Gradient
accumulation adds nothing: micro-batches accumulate in the pinned fp32 gradients (DeepSpeed
pins another 2 bytes of 16-bit gradients for it). The fp32 master and Adam's moments are
host memory too, not pinned: only the step touches them.

P = 4192 trainable elements on N = 2 ranks, in one bucket (stages 1-2) or one unit per
linear (stage 3) whose sizes divide by N, so no padding enters the figures.
"""
from __future__ import annotations

import resource
from typing import Any

import pytest
import torch

from multirank import run_ranks

WORLD = 2
P = 32 * 64 + 64 + 64 * 32 + 32
PART = P // WORLD
BUCKET_PARTS = [PART]  # stages 1-2: one reduce bucket holds every parameter
UNIT_PARTS = [(32 * 64 + 64) // WORLD, (64 * 32 + 32) // WORLD]  # stage 3: one unit per linear
PAGE = resource.getpagesize()


def pages(nbytes: int) -> int:
    return -(-nbytes // PAGE) * PAGE


def _config(stage: int, offload: dict[str, Any], accum: int = 1) -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": accum, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0, **offload}}


CASES: dict[str, tuple[int, dict[str, Any], int]] = {
    "stage1-optimizer": (1, {"offload_optimizer": {"device": "cpu"}}, 1),
    "stage2-optimizer": (2, {"offload_optimizer": {"device": "cpu"}}, 1),
    "stage2-optimizer-accum": (2, {"offload_optimizer": {"device": "cpu"}}, 2),
    "stage3-optimizer": (3, {"offload_optimizer": {"device": "cpu"}}, 1),
    "stage3-both": (3, {"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}, 1),
    "stage3-both-unpinned": (3, {"offload_optimizer": {"device": "cpu", "pin_memory": False},
                                 "offload_param": {"device": "cpu", "pin_memory": False}}, 1),
    "stage2-none": (2, {}, 1),
    "stage3-none": (3, {}, 1),
}


def _ledgers(rank: int, world_size: int) -> dict[str, dict[str, dict[str, int]]]:
    import zero_core

    found = {}
    for name, (stage, offload, accum) in CASES.items():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
        engine, _, _, _ = zero_core.initialize(model=model, config=_config(stage, offload, accum))
        for _ in range(accum):
            loss = engine(torch.randn(2, 32, dtype=torch.bfloat16)).float().pow(2).mean()
            engine.backward(loss)
            engine.step()
        report = engine.memory_report()
        found[name] = {where: {category: figures["current"] for category, figures in rows.items()}
                       for where, rows in report.items()}
        engine.destroy()
    return found


@pytest.fixture(scope="module")
def ledgers(native_pin_backend: object) -> dict[str, dict[str, dict[str, int]]]:
    return run_ranks(_ledgers, WORLD, timeout=300, env={"DS_PIN_MEMORY_BACKEND": "native"})[0]


@pytest.mark.parametrize("name", ["stage1-optimizer", "stage2-optimizer", "stage2-optimizer-accum",
                                  "stage3-optimizer"])
def test_optimizer_offload_pins_the_fp32_gradients_only(ledgers, name: str) -> None:  # type: ignore[no-untyped-def]
    pinned = ledgers[name]["host.pinned"]
    gradients = "optim.grad" if name.startswith("stage1") else "grad.partition"
    expected = sum(pages(4 * part) for part in (UNIT_PARTS if name.startswith("stage3") else BUCKET_PARTS))
    assert pinned == {gradients: expected, "total": expected}
    host = ledgers[name]["host"]
    assert host["optim.master"] == 4 * PART
    masters = 2 if name.startswith("stage3") else 1  # one bucket at stages 1-2; one unit per linear at stage 3
    assert host["optim.state"] == 8 * PART + 4 * masters  # m and v, and an fp32 step count per master tensor
    assert not any(category.startswith("optim.") for category in ledgers[name]["cpu"])


def test_param_offload_adds_the_16bit_partitions_to_the_pinned_volume(ledgers) -> None:  # type: ignore[no-untyped-def]
    pinned = ledgers["stage3-both"]["host.pinned"]
    partitions = sum(pages(2 * part) for part in UNIT_PARTS)
    gradients = sum(pages(4 * part) for part in UNIT_PARTS)
    assert pinned == {"param.partition": partitions, "grad.partition": gradients, "total": partitions + gradients}
    assert "param.partition" not in ledgers["stage3-both"]["cpu"]


def test_pin_memory_false_keeps_the_same_bytes_unpinned(ledgers) -> None:  # type: ignore[no-untyped-def]
    unpinned = ledgers["stage3-both-unpinned"]
    assert "host.pinned" not in unpinned
    pinned = ledgers["stage3-both"]
    exact = sum(4 * part + 2 * part for part in UNIT_PARTS)  # unpinned buffers are not rounded to pages
    assert unpinned["host"]["total"] == pinned["host"]["total"] + exact


@pytest.mark.parametrize(("offloaded", "plain"), [("stage2-optimizer", "stage2-none"),
                                                  ("stage3-optimizer", "stage3-none"),
                                                  ("stage3-both", "stage3-none")])
def test_the_device_drops_by_exactly_what_moved(ledgers, offloaded: str, plain: str) -> None:  # type: ignore[no-untyped-def]
    device, before = ledgers[offloaded]["cpu"], ledgers[plain]["cpu"]
    moved = before["optim.master"] + before["optim.state"]
    # Stage 3 on the device keeps no 16-bit partition (gathers cast the fp32 master). With the master offloaded
    # alone, gathers read a 16-bit partition kept on the device; with the params offloaded too, it is on the host.
    kept = device.get("param.partition", 0)
    assert kept == (2 * sum(UNIT_PARTS) if offloaded == "stage3-optimizer" else 0)
    assert before["total"] - device["total"] == moved - kept
    host = ledgers[offloaded]["host"]["total"] + ledgers[offloaded]["host.pinned"]["total"]
    # the host holds what moved, plus the persistent fp32 gradients (on the device they live only from backward
    # to step); pinned buffers are whole pages
    parts = UNIT_PARTS if offloaded.startswith("stage3") else BUCKET_PARTS
    gradients = sum(pages(4 * part) for part in parts)
    partitions = sum(pages(2 * part) for part in parts) if offloaded == "stage3-both" else 0
    assert host == before["optim.master"] + before["optim.state"] + gradients + partitions

