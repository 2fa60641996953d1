"""The swap slice NVMe offload moves at a time: a budget's share of the state, in whole I/O blocks, at most a
sub-group. No torch: the estimator's torch-free environments read the same formula."""
from __future__ import annotations

from typing import Any

import pytest
from zero_plugins import POOL_SHARE, budget_slice_numel, swap_slice_numel

MIB = 2**20
BLOCK = MIB // 4  # fp32 elements of one default aio.block_size
DEFAULTS: dict[str, Any] = {"sub_group_size": 1_000_000_000, "state_tensors": 2, "buffer_count": 4, "block_size": MIB,
            "elementwise": True}  # DeepSpeed's defaults, with Adam


@pytest.mark.parametrize("partition", [12_600_000, 27_600_000, 875_000_000, 8_750_000_000])
@pytest.mark.parametrize("buffer_count", [4, 9])
def test_the_pool_is_the_largest_whole_blocks_within_a_sixteenth_of_the_state(partition: int,
                                                                              buffer_count: int) -> None:
    # partitions large enough that one block per buffer is within the budget (below that, see the next tests)
    numel = swap_slice_numel(partition=partition, **{**DEFAULTS, "buffer_count": buffer_count})
    state = 4 * 3 * partition  # the fp32 master and Adam's two moments
    assert numel % BLOCK == 0
    assert buffer_count * 4 * numel <= state / POOL_SHARE < buffer_count * 4 * (numel + BLOCK)


def test_default_sub_groups_are_no_longer_the_whole_partition() -> None:
    # 7B on 8 ranks: the old pool was 4 x 3.5 GB = 14 GB against 10.5 GB of state; now 656 MB at most
    numel = swap_slice_numel(partition=875_000_000, **DEFAULTS)
    assert numel == 40_894_464 and 4 * 4 * numel <= 12 * 875_000_000 // 16


def test_a_small_partition_takes_one_block_or_the_whole_partition() -> None:
    assert swap_slice_numel(partition=1_000_000, **DEFAULTS) == BLOCK  # the budget is below one block
    assert swap_slice_numel(partition=100_000, **DEFAULTS) == 100_000  # a buffer never exceeds the partition
    assert swap_slice_numel(partition=0, **DEFAULTS) == 1


def test_a_smaller_sub_group_is_kept_as_it_is() -> None:
    assert swap_slice_numel(partition=100_000_000, **{**DEFAULTS, "sub_group_size": 300}) == 300


def test_an_optimizer_that_does_not_step_element_by_element_steps_whole_sub_groups() -> None:
    settings = {**DEFAULTS, "elementwise": False}
    assert swap_slice_numel(partition=100_000_000, **settings) == 100_000_000
    assert swap_slice_numel(partition=100_000_000, **{**settings, "sub_group_size": 10**7}) == 10**7


def test_the_budget_follows_the_state_tensors_and_the_block_size() -> None:
    # SGD without momentum swaps the master alone: a third of Adam's bytes, so a third of the slice
    adam = budget_slice_numel(partition=3 * 2**26, state_tensors=2, buffer_count=4, block_size=4096)
    sgd = budget_slice_numel(partition=3 * 2**26, state_tensors=0, buffer_count=4, block_size=4096)
    assert (adam, sgd) == (3 * 3 * 2**20, 3 * 2**20)
    assert budget_slice_numel(partition=3 * 2**26, state_tensors=2, buffer_count=4, block_size=8 * MIB) == 4 * 2**21
