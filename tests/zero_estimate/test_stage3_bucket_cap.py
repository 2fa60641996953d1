"""stage3_bucket_cap: how many elements of consecutive units one stage-3 reduce bucket holds, which the engine
packs (zero_core.sharding.pack_buckets) and the estimator predicts (zero_estimate's largest_bucket)."""
from __future__ import annotations

from zero_plugins.placement import LATENCY_BOUND_NUMEL, stage3_bucket_cap
from zero_estimate import ModelSpec, ModuleParams, ZeroSettings
from zero_estimate._partitions import largest_bucket

BIG = 4 * LATENCY_BOUND_NUMEL


def test_small_units_pack_up_to_the_latency_bound_and_large_ones_to_the_largest_unit() -> None:
    assert stage3_bucket_cap(1000, 500_000_000) == LATENCY_BOUND_NUMEL == 2**20
    assert stage3_bucket_cap(BIG, 500_000_000) == BIG  # a large model's reduce buffers stay what its units need
    assert stage3_bucket_cap(1000, 5000) == stage3_bucket_cap(BIG, 5000) == 5000  # reduce_bucket_size bounds all


def _linears(*outs: int) -> ModelSpec:
    return ModelSpec.from_modules("linears", tuple(ModuleParams(str(i), ((out, 1024),)) for i, out in enumerate(outs)))


def test_the_estimators_largest_stage3_bucket_follows_the_cap() -> None:
    stage3 = ZeroSettings(stage=3, stage3_param_persistence_threshold=0)
    # six units of 64 Ki elements: one bucket of all six, as the engine packs them
    assert largest_bucket(_linears(*[64] * 6), stage3) == 6 * 64 * 1024
    # units of 4 Mi elements are each a bucket; the 1 Mi ones next to each other share one up to 4 Mi
    assert largest_bucket(_linears(4096, 1024, 1024, 4096), stage3) == 4096 * 1024
    # reduce_bucket_size bounds every bucket but a larger unit alone
    small = ZeroSettings(stage=3, stage3_param_persistence_threshold=0, reduce_bucket_size=3 * 64 * 1024)
    assert largest_bucket(_linears(*[64] * 6), small) == 3 * 64 * 1024
