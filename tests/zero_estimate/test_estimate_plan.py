"""`plan`: every configuration that fits, cheapest first, and the nearest misses."""
from __future__ import annotations

import pytest
from zero_estimate import Cluster, EstimateError, Limits, LoraSpec, Training, from_numbers, from_preset, plan

GIB = 2**30


def _configs(candidates) -> list[tuple[int, str]]:
    return [(c.estimate.zero.stage, c.estimate.zero.label()) for c in candidates]


def test_everything_fits_a_small_model_in_cost_order_without_nvme_unless_given():
    result = plan(from_numbers(1_000_000, 100_000), Cluster(4), Limits(80 * GIB))
    assert _configs(result.fits) == [
        (0, "none/none"),
        (1, "none/none"),
        (2, "none/none"),
        (3, "none/none"),
        (2, "cpu/none"),
        (3, "cpu/none"),
        (3, "cpu/cpu"),
    ]
    assert result.misses == []
    with_nvme = plan(from_numbers(1_000_000, 100_000), Cluster(4), Limits(80 * GIB, nvme=GIB))
    assert _configs(with_nvme.fits)[-3:] == [(3, "nvme/none"), (3, "nvme/cpu"), (3, "nvme/nvme")]


def test_pythia_lora_on_four_24gb_gpus_needs_stage_3_and_says_how_far_stage_2_misses():
    spec = from_preset("pythia-6.9b", lora=LoraSpec(128))
    # DeepSpeed issue #4305's setup; the transformers of its day ran GPT-NeoX's eager attention.
    result = plan(spec, Cluster(4), Limits(24 * GIB), Training(precision="fp16", seq_len=1200, attention="eager"))
    assert _configs(result.fits)[0] == (3, "none/none")
    assert all(c.estimate.peak("gpu")[1] <= 24 * GIB for c in result.fits)
    nearest = result.misses[0]
    assert nearest.estimate.zero.stage == 2 and 0 < nearest.over["gpu"] < 3 * GIB
    overs = [c.shortfall(result.limits) for c in result.misses]
    assert overs == sorted(overs)
    assert result.as_dict()["fits"][0]["zero_optimization"] == {"stage": 3}


def test_host_memory_is_checked_when_given():
    result = plan(from_numbers(7_000_000_000, 200_000_000), Cluster(8), Limits(80 * GIB, cpu_memory=64 * GIB))
    # Without zero.Init every process builds the fp32 model on the host: 8 x 28 GB does not fit in 64 GiB.
    assert all(c.estimate.zero.stage == 3 for c in result.fits)
    assert any("cpu" in c.over for c in result.misses)


def test_limits_must_be_positive():
    with pytest.raises(EstimateError, match="gpu_memory: must be at least 1"):
        Limits(0)
