"""The multi-rank launcher (zero_core.launch, the tests' spawn helper): results in rank order, a failing rank fails fast, a hang times out."""
from __future__ import annotations

import time

import pytest
from zero_core.launch import RanksFailed


def _sum_ranks(rank: int, world_size: int, offset: int) -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([rank + offset])
    dist.all_reduce(value)
    return int(value.item())


def _rank1_raises(rank: int, world_size: int) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if rank == 1:
        raise ValueError("boom on rank 1")
    dist.barrier()  # rank 0 would wait here forever


def _rank0_hangs(rank: int, world_size: int) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if rank == 0:
        dist.barrier()  # rank 1 never joins
    else:
        time.sleep(600)


def test_results_come_back_in_rank_order(run_ranks) -> None:
    assert run_ranks(_sum_ranks, 3, 10) == [33, 33, 33]


def test_a_failing_rank_fails_at_once_with_its_traceback(run_ranks) -> None:
    start = time.monotonic()
    with pytest.raises(RanksFailed, match="rank 1 of 2 failed(.|\n)*boom on rank 1") as caught:
        run_ranks(_rank1_raises, 2, timeout=60)
    assert time.monotonic() - start < 30
    # The `zero` command prints the message on one line and the traceback below it, with its line breaks.
    assert caught.value.message == "rank 1 of 2 failed; its traceback:"
    lines = caught.value.detail.splitlines()
    assert (lines[0], lines[-1]) == ("Traceback (most recent call last):", "ValueError: boom on rank 1")


def test_a_hang_fails_after_the_timeout(run_ranks) -> None:
    with pytest.raises(RanksFailed, match=r"ranks \[0, 1\] of 2 still running after 5s"):
        run_ranks(_rank0_hangs, 2, timeout=5)
