"""gloo's collectives (comm/_gloo.py): right results, and memory allocated and freed where the rank's thread says.

On 2 gloo ranks with zero-pin's count of the CPU allocator, each collective runs 30 times, synchronous and not.
After each returns (or its handle's wait does) the allocator holds exactly what the test holds: nothing of gloo's
is left, and a tensor dropped right after a collective is freed at once. Inside each, the peak is exactly what the
test allocated, plus, for a reduce-scatter, one copy of its input, which the ledger counts as `comm.staging`
from the launch to the wait. Before, gloo's thread freed its copies and the collective's tensors a moment after
reporting completion, and these figures moved from one iteration to the next.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch

N = 1 << 16  # fp32 elements: 256 KiB
REPEATS = 30


def _collectives(rank: int, world_size: int) -> dict[str, Any]:
    import torch.distributed as dist
    import zero_pin
    from zero_core.accelerator import get_accelerator
    from zero_core.comm import Collectives
    from zero_core.memory import MemoryLedger

    get_accelerator().count_allocations()
    dist.init_process_group("gloo")
    ledger = MemoryLedger()
    comm = Collectives(ledger)
    chunk = N // world_size
    ones = torch.ones(N)
    summed = torch.full((N,), float(sum(range(1, world_size + 1))))
    gathered = torch.arange(world_size, dtype=torch.float32).repeat_interleave(chunk)
    seen: dict[str, Counter[tuple[int, int]]] = {}

    def measure(name: str, run: Any) -> None:
        """Per repeat: bytes left after it (the test keeps nothing), and its peak beyond what was held before."""
        counts: Counter[tuple[int, int]] = Counter()
        for _ in range(REPEATS):
            before = zero_pin.host_allocator_stats()["current"]
            zero_pin.reset_host_allocator_peak()
            run()
            stats = zero_pin.host_allocator_stats()
            counts[(stats["current"] - before, stats["peak"] - before)] += 1
        seen[name] = counts

    def broadcast() -> None:
        tensor = torch.full((N,), float(rank))
        comm.broadcast(tensor, src_rank=1)
        assert torch.equal(tensor, ones)

    def all_reduce(async_op: bool) -> None:
        tensor = torch.full((N,), float(rank + 1))
        work = comm.all_reduce(tensor, async_op=async_op)
        if work is not None:
            work.wait()
        assert torch.equal(tensor, summed)

    def all_gather(async_op: bool) -> None:
        output = torch.empty(N)
        mine = output.view(world_size, -1)[rank].fill_(float(rank))  # in place, as stage 3 gathers
        work = comm.all_gather(output, mine, async_op=async_op)
        if work is not None:
            work.wait()
        assert torch.equal(output, gathered)

    def reduce_scatter(async_op: bool) -> None:
        bucket = torch.full((N,), float(rank + 1))
        lo, hi = rank * chunk, (rank + 1) * chunk
        work = comm.reduce_scatter(bucket[lo:hi], bucket, async_op=async_op)  # in place, as the reducer does
        if work is not None:
            assert ledger.current("comm.staging") == 4 * N, "the copy is counted while the collective runs"
            work.wait()
        assert ledger.current("comm.staging") == 0
        assert torch.equal(bucket[lo:hi], summed[lo:hi])

    measure("broadcast", broadcast)
    for async_op in (False, True):
        measure(f"all_reduce async={async_op}", lambda: all_reduce(async_op))
        measure(f"all_gather async={async_op}", lambda: all_gather(async_op))
        measure(f"reduce_scatter async={async_op}", lambda: reduce_scatter(async_op))
    dist.destroy_process_group()
    return {"seen": seen}


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    from multirank import run_ranks
    from zero_pin._native_build import COUNTING_ALLOCATOR_OP

    COUNTING_ALLOCATOR_OP.load()  # built once here; the ranks load it
    results: list[dict[str, Any]] = run_ranks(_collectives, 2, timeout=120)
    return results


# Each collective's peak: the test's own tensor (4 N bytes), nothing of gloo's; a reduce-scatter adds one copy
# of its input, ours.
PEAKS = {"broadcast": 4 * N, "all_reduce": 4 * N, "all_gather": 4 * N, "reduce_scatter": 2 * 4 * N}


@pytest.mark.parametrize("op", list(PEAKS))
def test_a_collective_leaves_nothing_behind_and_peaks_at_the_same_bytes_every_time(ranks: list[dict[str, Any]],
                                                                                  op: str) -> None:
    for rank in ranks:
        runs = {name: counts for name, counts in rank["seen"].items() if name.split()[0] == op}
        assert runs
        for name, counts in runs.items():
            assert counts == Counter({(0, PEAKS[op]): REPEATS}), (name, counts)


def test_tensors_gloo_never_lets_go_of_are_an_error_naming_the_collective(monkeypatch: pytest.MonkeyPatch) -> None:
    from zero_core.comm import _gloo

    monkeypatch.setattr(_gloo, "RELEASE_TIMEOUT", 0.05)
    handover = _gloo.Handover("all_gather")
    kept = handover(torch.zeros(4))  # stands for a work object of gloo's that is never dropped
    with pytest.raises(_gloo.GlooStillHolds, match="gloo still held the tensors of a completed all_gather"):
        handover.settle()
    del kept
    handover.settle()  # let go: returns at once
