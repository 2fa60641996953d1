"""Memory and communication, exactly, per rank, against DESIGN.md's contracts (bf16 compute, Adam).

For P trainable parameters on N ranks (Ppad: P padded per bucket to a multiple of N):
- stage 0: 2P params + 2P grads + 4P master + 8P Adam state (m, v);
- stage 1: 2Ppad params + 2Ppad grads + (4 + 8) Ppad / N;
- stage 2: 2Ppad params + 2Ppad / N grad partition + (4 + 8) Ppad / N, plus reduce buckets
  that exist only during backward, bounded by reduce_bucket_size;
gradients exist from the backward that makes them until the step frees them, so they are
checked as peaks, the rest as what a rank holds between steps;
- frozen parameters (the LoRA base) hold their 16-bit weights and nothing else.
Adam also keeps a 4-byte step counter per master tensor (one per bucket): counted exactly.

The dense model's parameter sizes are multiples of 4, so Ppad = P here; the padding rules
are tested in test_engine_layout.py. Each configuration is built and trained inside a
StorageTracker, which proves the ledger complete: every byte alive after a step is a byte
the ledger accounts for. Communication per step per rank is 2 * (N-1)/N * 2P bytes (ring
all-reduce = reduce-scatter + all-gather of the 16-bit gradients/params), plus a 4-byte
all-reduce of the gradient norm from stage 1 on (docs/engine.md, "Communication").
"""
from __future__ import annotations

import gc
from typing import Any

import pytest
import torch

from engine_helpers import (MEMORY_MODEL_INPUTS, collective_counts, collective_delta, count_params, memory_config,
                            memory_model, wait_until_freed)

BUCKET = 5000  # elements
STEP_COUNTER = 4  # bytes: torch Adam's per-parameter `step` tensor (fp32 scalar)


RUNS = [(kind, stage, overlap) for kind in ("dense", "lora") for stage in (0, 1, 2)
        for overlap in ((False, True) if stage == 2 else (False,))]


def config(stage: int, overlap: bool, accumulation: int) -> dict[str, Any]:
    return memory_config({"stage": stage, "reduce_bucket_size": BUCKET, "overlap_comm": overlap},
                         gradient_accumulation_steps=accumulation)


def _measure(rank: int, world_size: int) -> dict[Any, Any]:
    import zero_core
    from zero_core import StorageTracker

    results: dict[Any, Any] = {}
    for kind, stage, overlap in RUNS:
        x = torch.randn(4, MEMORY_MODEL_INPUTS[kind]).bfloat16()
        with StorageTracker() as tracker:
            model = memory_model(kind)
            frozen = [p for p in model.parameters() if not p.requires_grad]
            engine, _, _, _ = zero_core.initialize(model=model, config=config(stage, overlap, 1))
            sent = []
            for _ in range(2):
                before = collective_counts(engine)
                loss = engine(x).float().pow(2).mean()
                engine.backward(loss)
                engine.step()
                sent.append(collective_delta(collective_counts(engine), before))
                wait_until_freed(engine, ("grad.full", "grad.partition", "grad.bucket"))
            del loss
            gc.collect()
            report = engine.memory_report()
            alive = tracker.current_bytes("cpu")
        results[kind, stage, overlap] = {
            "memory": dict(report["cpu"]),
            "alive": alive,
            "sent": sent,
            "frozen_grads": [p.grad is not None for p in frozen],
            "buckets": [len(g.layouts) for g in engine.optimizer.groups],
        }
        engine.destroy()
    for stage in (0, 1, 2):  # accumulation: what is sent on the first micro-batch and at the boundary
        x = torch.randn(4, 32).bfloat16()
        engine, _, _, _ = zero_core.initialize(model=memory_model("dense"), config=config(stage, False, 2))
        sent = []
        for _ in range(2):
            before = collective_counts(engine)
            engine.backward(engine(x).float().pow(2).mean())
            engine.step()
            sent.append(collective_delta(collective_counts(engine), before))
        results["accumulation", stage] = sent
        engine.destroy()
    return results


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def measured(request) -> tuple[int, list[dict[Any, Any]]]:  # type: ignore[no-untyped-def]
    from multirank import run_ranks

    return request.param, run_ranks(_measure, request.param, timeout=300)


def _ring(world_size: int, nbytes: int, factor: int = 1) -> int:
    return factor * (world_size - 1) * nbytes // world_size


@pytest.mark.parametrize("kind,stage,overlap", RUNS)
def test_ledger_matches_the_contract(measured, kind: str, stage: int, overlap: bool) -> None:  # type: ignore[no-untyped-def]
    n, per_rank = measured
    p, f = count_params(memory_model(kind))
    assert p % n == 0, "sizes chosen so that no padding is needed"
    owned = p if stage == 0 else p // n
    for rank_result in per_rank:
        result = rank_result[kind, stage, overlap]
        memory = result["memory"]
        current = {category: figures["current"] for category, figures in memory.items()}
        buckets = sum(result["buckets"])
        # between steps a rank holds its weights, master and optimizer state; gradients exist from
        # the backward that makes them until the step frees them, so they show as peaks
        expected = {
            "param.persistent": 2 * p + 2 * f,
            "optim.master": 4 * owned,
            "optim.state": 8 * owned + STEP_COUNTER * buckets,
        }
        expected["total"] = sum(expected.values())
        assert {c: v for c, v in current.items() if v} == expected
        peak = {category: figures["peak"] for category, figures in memory.items()}
        assert peak["optim.grad"] == 4 * owned  # the fp32 gradients exist only inside the step
        if stage == 2:
            assert peak["grad.partition"] == 2 * owned and "grad.full" not in peak
            # one bucket filling, one in flight with overlap_comm, and one whose collective gloo has
            # completed but not yet let go of (see wait_until_freed)
            bound = (3 if overlap else 2) * 2 * BUCKET
            assert 0 < peak["grad.bucket"] <= bound
        else:
            assert peak["grad.full"] == 2 * p and "grad.partition" not in peak and "grad.bucket" not in peak
        assert result["alive"] == expected["total"], "every byte alive after a step is in the ledger"
        assert not any(result["frozen_grads"]), "frozen parameters get no gradient"


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_bytes_sent_per_step(measured, stage: int) -> None:  # type: ignore[no-untyped-def]
    n, per_rank = measured
    p, _ = count_params(memory_model("dense"))
    for result in per_rank:
        for sent in result["dense", stage, False]["sent"]:
            if stage == 0:
                assert set(sent) == {"all_reduce"}
                # one all-reduce per bucket, each rounded down to whole bytes
                assert 0 <= _ring(n, 2 * p, 2) - sent["all_reduce"] < len(result["dense", stage, False]["buckets"]) * 3
            else:
                assert sent == {"reduce_scatter": _ring(n, 2 * p), "all_gather": _ring(n, 2 * p),
                                "all_reduce": _ring(n, 4, 2)}


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_no_reduction_before_the_boundary(measured, stage: int) -> None:  # type: ignore[no-untyped-def]
    n, per_rank = measured
    p, _ = count_params(memory_model("dense"))
    for result in per_rank:
        first, boundary = result["accumulation", stage]
        if stage < 2:
            assert first == {}
        else:
            # stage 2 keeps only its gradient slice, so it must reduce every micro-batch (docs/engine.md)
            assert first == {"reduce_scatter": _ring(n, 2 * p)}
        assert boundary != {}
