"""Stage 3 reduces its units' gradients in buckets of up to `reduce_bucket_size` elements, as DeepSpeed does
(issue 34, item 4): one reduce-scatter per bucket, not one per unit.

On gloo every collective is a point where the ranks wait for each other, and on a loaded machine each such
point costs a scheduling delay; a unit per reduce-scatter made a small model's stage-3 step wait 15 times in
backward where DeepSpeed waits once. The model: 6 units of UNIT elements (Linear(64, 64), threshold 0), on 2
ranks. The losses are the same whatever the packing (each element's sum is the same sum), and the reduce
buffer (`grad.bucket`) is at most two buckets (one filling, one in flight).
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

from engine_helpers import collective_counts, collective_delta, memory_config

UNIT = 64 * 64 + 64  # one Linear(64, 64), weight and bias: a multiple of 2, so nothing is padded on 2 ranks
UNITS = 6
BF16 = 2  # the reduce buffer's element: gradients are reduced in the compute dtype
pytestmark = pytest.mark.timeout(120)


def _train(bucket_units: int) -> dict[str, Any]:
    import zero_core

    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(64, 64) for _ in range(UNITS)))
    config = memory_config({"stage": 3, "stage3_param_persistence_threshold": 0,
                            "reduce_bucket_size": bucket_units * UNIT})
    engine, _, _, _ = zero_core.initialize(model=model, config=config)
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(1)).bfloat16()
    losses, reduce_scatters = [], []
    for _ in range(2):
        loss = engine(x).float().pow(2).mean()
        before = collective_counts(engine, "calls")
        engine.backward(loss)
        reduce_scatters.append(collective_delta(collective_counts(engine, "calls"), before).get("reduce_scatter", 0))
        engine.step()
        losses.append(loss.item())
    result = {"losses": losses, "reduce_scatters": reduce_scatters,
              "bucket_peak": engine.memory_report()["cpu"]["grad.bucket"]["peak"]}
    engine.destroy()
    return result


def _measure(rank: int, world_size: int) -> dict[int, dict[str, Any]]:
    return {bucket_units: _train(bucket_units) for bucket_units in (1, 2, UNITS)}


def test_stage3_reduces_one_bucket_of_units_per_collective(run_ranks) -> None:  # type: ignore[no-untyped-def]
    per_rank = run_ranks(_measure, 2, timeout=100)
    for result in per_rank:
        # reduce_bucket_size in units -> reduce-scatters per backward: every unit alone, pairs, all in one
        assert {units: r["reduce_scatters"] for units, r in result.items()} == {1: [6, 6], 2: [3, 3], UNITS: [1, 1]}
        assert result[1]["losses"] == result[2]["losses"] == result[UNITS]["losses"]
        # with overlap_comm (stage 3's default) a bucket fills while the one before is in flight; one bucket alone
        assert {units: r["bucket_peak"] for units, r in result.items()} == {
            1: 2 * UNIT * BF16, 2: 2 * 2 * UNIT * BF16, UNITS: UNITS * UNIT * BF16}
