"""step_traffic: a step's bytes and FLOPs per rank, derived by hand for a 1M-param model on 4 ranks (no torch).

P = 1,000,000 bf16 params (2 MB); 4 ranks, so a ring collective of B bytes sends 3B/4 per rank (1.5 MB for P);
a rank's shard is 250,000 elements. Micro-batch 2 x 8 tokens x 3 accumulation steps = 48 tokens per step.
"""
from __future__ import annotations

import pytest
from zero_estimate import (
    Cluster, EstimateError, ModelSpec, ModuleParams, Rates, Training, ZeroSettings, estimate, from_numbers, step_traffic,
)

P = 1_000_000
MODEL = from_numbers(P, P // 10)
TRAINING = Training(micro_batch=2, seq_len=8, grad_accum=3)
RING = 1_500_000  # 3/4 of P's 2 MB
FLOPS = (4 * P + 2 * P) * 48  # 6 P per token


def _traffic(stage: int, offload: str = "none/none", training: Training = TRAINING, model: ModelSpec = MODEL,
             cluster: Cluster = Cluster(4), rates: Rates | None = None):
    optimizer, param = offload.split("/")
    zero = ZeroSettings(stage=stage, offload_optimizer=optimizer, offload_param=param)
    return step_traffic(estimate(model, cluster, training, zero), rates)


@pytest.mark.parametrize(
    ("stage", "gathered", "reduced"),
    [
        (0, 0, 2 * RING),  # one all-reduce at the boundary
        (1, RING, RING),  # reduce-scatter at the boundary, all-gather of the updated weights
        (2, RING, 3 * RING),  # reduce-scatter every micro-batch
        (3, 3 * 2 * RING, 3 * RING),  # each micro-batch gathers in forward and backward, reduce-scatters once
    ],
)
def test_collective_bytes_per_stage(stage, gathered, reduced):
    traffic = _traffic(stage)
    assert (traffic.tokens, traffic.collective_dtype) == (48, "bf16")
    assert (traffic.gathered_bytes, traffic.reduced_bytes) == (gathered, reduced)
    assert (traffic.model_flops, traffic.recompute_flops) == (FLOPS, 0)
    assert traffic.host_to_device_bytes == traffic.device_to_host_bytes == traffic.nvme_read_bytes == 0


def test_full_checkpointing_recomputes_one_forward_and_gathers_again_at_stage_3():
    traffic = _traffic(3, training=Training(micro_batch=2, seq_len=8, grad_accum=3, checkpointing="full"))
    assert (traffic.gathered_bytes, traffic.recompute_flops) == (3 * 3 * RING, 2 * P * 48)


@pytest.mark.parametrize(
    ("stage", "offload", "to_device", "to_host", "nvme_read", "nvme_write"),
    [
        # gradient slices (500 KB a shard) down every micro-batch, the updated weights up once
        (2, "cpu/none", 500_000, 3 * 500_000, 0, 0),
        (1, "cpu/none", 500_000, 500_000, 0, 0),  # stage 1 copies its gradients down once, at the boundary
        # the shard goes up for each gather (2 a micro-batch); the host step updates it in place
        (3, "cpu/cpu", 3 * 2 * 500_000, 3 * 500_000, 0, 0),
        # master, m and v of the shard (250,000 x 12 bytes) read and written once a step
        (3, "nvme/none", 500_000, 3 * 500_000, 3_000_000, 3_000_000),
        # and each gather reads the shard from NVMe; the step writes the updated shard back
        (3, "nvme/nvme", 3 * 2 * 500_000, 3 * 500_000, 3_000_000 + 3_000_000, 3_000_000 + 500_000),
    ],
)
def test_offload_bytes(stage, offload, to_device, to_host, nvme_read, nvme_write):
    traffic = _traffic(stage, offload)
    assert (traffic.host_to_device_bytes, traffic.device_to_host_bytes) == (to_device, to_host)
    assert (traffic.nvme_read_bytes, traffic.nvme_write_bytes) == (nvme_read, nvme_write)


def test_lora_flops_count_the_frozen_base_forward_and_input_gradients():
    lora = from_numbers(P, P // 10, trainable_params=10_000)
    traffic = _traffic(3, model=lora)
    assert traffic.model_flops == (4 * P + 2 * 10_000) * 48
    assert (traffic.gathered_bytes, traffic.reduced_bytes) == (3 * 2 * RING, 3 * 15_000)  # only LoRA's grads


def test_persistent_params_are_not_gathered_and_their_gradients_all_reduced():
    # A 1000 x 1000 weight (gathered) and a 1000-element bias (at most the 100,000-element threshold: kept whole).
    spec = ModelSpec.from_modules("tiny", (ModuleParams("w", trainable=((1000, 1000),)),
                                           ModuleParams("b", trainable=((1000,),))))
    traffic = _traffic(3, model=spec, training=Training(seq_len=8))
    assert traffic.gathered_bytes == 2 * RING
    assert traffic.reduced_bytes == RING + 2 * 1500  # the bias's 2000 bytes all-reduced: 2 x 3/4 of them


def test_transfer_bound_fraction_and_ranking_key_from_the_slowest_resource():
    # Rates that make compute 1 s: collectives 13.5 MB at 6.75 MB/s (2 s, overlapped at stage 3), PCIe 3 MB up
    # at 1 MB/s (3 s), NVMe 9.5 MB per rank on a drive of 9.5 MB/s shared by 4 ranks (4 s): the step is 4 s.
    rates = Rates(flops_16bit=FLOPS, nvlink=6.75e6, pcie=1e6, nvme=9.5e6)
    traffic = _traffic(3, "nvme/nvme", rates=rates)
    assert (traffic.transfer_bound, traffic.cost_per_token) == (0.75, 4 / 48)
    # Stage 0 without overlap_comm: its 3 MB all-reduce (at 1 MB/s, 3 s) comes after the 1 s of compute.
    assert _traffic(0, rates=Rates(flops_16bit=FLOPS, nvlink=1e6)).transfer_bound == 0.75
    # Across nodes the network's rate applies; fp32 computes at the fp32 rate.
    across = _traffic(0, cluster=Cluster(2, 2), rates=Rates(flops_16bit=FLOPS, nvlink=1e12, network=1e6))
    assert across.transfer_bound == 0.75
    fp32 = Training(precision="fp32", micro_batch=2, seq_len=8, grad_accum=3)
    assert _traffic(0, training=fp32).reduced_bytes == 4 * RING  # 4-byte gradients
    alone = _traffic(0, training=fp32, cluster=Cluster(1), rates=Rates(flops_fp32=FLOPS / 4))
    assert (alone.transfer_bound, alone.cost_per_token) == (0.0, 4 / 48)


def test_one_rank_sends_nothing():
    traffic = _traffic(3, cluster=Cluster(1))
    assert (traffic.gathered_bytes, traffic.reduced_bytes, traffic.transfer_bound) == (0, 0, 0.0)


@pytest.mark.parametrize(("rate", "value", "message"), [
    ("pcie", 0, "pcie: must be greater than 0 (got 0)"),
    ("nvme", float("inf"), "nvme: must be a finite number (got inf)"),
])
def test_rates_must_be_positive_and_finite(rate, value, message):
    with pytest.raises(EstimateError) as error:
        Rates(**{rate: value})
    assert str(error.value) == message
