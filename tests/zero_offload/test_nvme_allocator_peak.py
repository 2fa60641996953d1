"""NVMe offload's allocator peak against CPU offload's, exactly: the ledger explains the whole difference.

Two gloo ranks count torch's CPU allocator (zero-pin's exact count, started before any model is built)
and train the same bf16 model (one linear, so stage 3 has one unit) on the same data, at stages 2 and 3,
once with `offload_optimizer: cpu` and once with `nvme` (9 buffers of 16384 elements, reading ahead and
writing behind: a sub_group_size below the budget's swap slice, so NVMe cuts the sub-groups CPU offload
does; test_nvme_default_budget.py covers the default sub_group_size, cut finer). Per run, two peaks, each as the rise above what was counted before `initialize`:
- initialize: nvme's is cpu's minus the fp32 master plus the swap pool (the optimizer state is made by
  the first step);
- three training steps: nvme's is cpu's minus the host ledger's difference (the master and Adam's two
  moments, against the swap pool);
and each optimizer step makes as many allocations with nvme as with cpu. So NVMe offload holds nothing
at its peak but the pool, and its step allocates nothing of its own: staging or bounce buffers per
sub-group or per step, or reads ahead past `buffer_count`, fail here. Two transients of initialize
(the master staged through a host copy of the whole partition, the pool allocated twice) fail the
stage-3 figure; at stage 2 on two ranks they hide under the flat parameters' own transient, which is
exactly as large (2 bytes of every element against 4 of half of them). The pool and the master are
checked against their sizes from the model's shape too.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

from nvme_peak_helpers import counted_runs

IN, OUT, BATCH, STEPS = 512, 1024, 256, 3
WORLD = 2
PARTITION = (IN * OUT + OUT) // WORLD  # 262656 elements of fp32 master per rank
SUB_GROUP, BUFFERS = 16384, 9
POOL = BUFFERS * SUB_GROUP * 4 + 4096  # the torch pin backend pins nothing here: 4 KiB over, for the alignment
STEP_COUNTS = 4 * -(-PARTITION // SUB_GROUP)  # each sub-group's fp32 step count, in host memory in both runs


def _config(stage: int, device: str, nvme_path: str) -> dict[str, Any]:
    block: dict[str, Any] = {"device": device}
    if device == "nvme":
        block.update(nvme_path=nvme_path, buffer_count=BUFFERS, pipeline_read=True, pipeline_write=True)
    return {"train_micro_batch_size_per_gpu": BATCH, "gradient_clipping": 1.0, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": stage, "sub_group_size": SUB_GROUP,
                                  "stage3_param_persistence_threshold": 0, "offload_optimizer": block}}


def _run(rank: int, stage: int, device: str, nvme_path: str) -> dict[str, Any]:
    import zero_core
    import zero_pin

    torch.manual_seed(0)
    model = torch.nn.Linear(IN, OUT).to(torch.bfloat16)
    start = zero_pin.host_allocator_stats()["current"]
    zero_pin.reset_host_allocator_peak()
    engine, optimizer, _, _ = zero_core.initialize(model=model, config=_config(stage, device, nvme_path))
    init = zero_pin.host_allocator_stats()["peak"] - start
    zero_pin.reset_host_allocator_peak()
    generator = torch.Generator().manual_seed(rank)
    allocations = []  # made by each optimizer step
    for _ in range(STEPS):
        loss = engine(torch.randn(BATCH, IN, generator=generator).to(torch.bfloat16)).float().pow(2).mean()
        engine.backward(loss)
        before = zero_pin.host_allocator_stats()["allocations"]
        engine.step()
        allocations.append(zero_pin.host_allocator_stats()["allocations"] - before)
    train = zero_pin.host_allocator_stats()["peak"] - start
    host = {category: figures["current"] for category, figures in engine.memory_report()["host"].items()}
    engine.destroy()
    return {"init": init, "train": train, "host": host, "allocations": allocations}


@pytest.fixture(scope="module")
def peaks(tmp_path_factory: pytest.TempPathFactory) -> Any:
    yield from counted_runs(tmp_path_factory, "nvme-peak", _run, WORLD, timeout=180)


@pytest.mark.parametrize("stage", [2, 3])
def test_the_ledger_sizes_what_nvme_moves_out_and_what_it_keeps(peaks: Any, stage: int) -> None:
    for rank in peaks:
        cpu, nvme = rank[stage, "cpu"]["host"], rank[stage, "nvme"]["host"]
        assert cpu["optim.master"] == 4 * PARTITION
        assert cpu["optim.state"] == 2 * 4 * PARTITION + STEP_COUNTS
        assert "optim.master" not in nvme or nvme["optim.master"] == 0
        assert nvme["optim.state"] == STEP_COUNTS, "only the step counts stay in memory"
        assert nvme["swap.buffer"] == POOL
        assert nvme["grad.partition"] == cpu["grad.partition"] == 4 * PARTITION


@pytest.mark.parametrize("stage", [2, 3])
def test_initialize_peaks_below_cpu_offload_by_the_master_less_the_pool(peaks: Any, stage: int) -> None:
    for rank in peaks:
        cpu, nvme = rank[stage, "cpu"], rank[stage, "nvme"]
        assert nvme["init"] == cpu["init"] - 4 * PARTITION + POOL


@pytest.mark.parametrize("stage", [2, 3])
def test_training_peaks_below_cpu_offload_by_the_state_less_the_pool(peaks: Any, stage: int) -> None:
    for rank in peaks:
        cpu, nvme = rank[stage, "cpu"], rank[stage, "nvme"]
        moved = cpu["host"]["total"] - nvme["host"]["total"]
        assert moved == 3 * 4 * PARTITION - POOL, "the master and both moments out, the pool in"
        assert nvme["train"] == cpu["train"] - moved


@pytest.mark.parametrize("stage", [2, 3])
def test_the_swapped_step_allocates_nothing_cpu_offload_does_not(peaks: Any, stage: int) -> None:
    for rank in peaks:
        cpu, nvme = rank[stage, "cpu"]["allocations"], rank[stage, "nvme"]["allocations"]
        assert nvme == cpu, "staging or bounce buffers allocated per sub-group or per step"
        assert cpu[1] == cpu[2] < cpu[0], "the first step makes the state; later ones the same transients"
