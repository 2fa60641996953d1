"""How much of the swapped optimizer state NVMe offload moves at a time: one formula for the engine and the estimator.

With `offload_optimizer: {device: nvme}` the fp32 master and the optimizer state of this rank's
partition live in swap files and stream through `buffer_count` host buffers of one swap slice each.
A slice as large as a sub-group made the pool as large as the state at DeepSpeed's default
`sub_group_size` (1e9: one sub-group of the whole partition, so 4 buffers held 16 B per element against
Adam's 12). So the slice comes from a budget: the pool holds at most 1/POOL_SHARE of the bytes it
streams, in whole `aio.block_size` requests (at least one), and never more than a sub-group.
"""
from __future__ import annotations

#: The pool of swap buffers takes at most 1/POOL_SHARE of the fp32 master and state it streams.
POOL_SHARE = 16
_FP32 = 4


def budget_slice_numel(*, partition: int, state_tensors: int, buffer_count: int, block_size: int) -> int:
    """fp32 elements of the largest slice whose `buffer_count` buffers stay within the budget: a whole number of
    `block_size`-byte I/O blocks, at least one (below that, requests would be cut short of a block)."""
    block = max(block_size // _FP32, 1)
    share = (1 + state_tensors) * partition // (POOL_SHARE * max(buffer_count, 1))
    return max(share // block, 1) * block


def swap_slice_numel(*, partition: int, sub_group_size: int, state_tensors: int, buffer_count: int,
                     block_size: int, elementwise: bool) -> int:
    """Elements the NVMe step swaps in and steps at once (each pool buffer holds one slice of one tensor).

    `partition`: this rank's trainable elements; `state_tensors`: the optimizer's fp32 state tensors per
    element; `elementwise`: whether the optimizer updates each element from its own grad and state alone,
    so that any cut steps to the same values. Another optimizer steps whole sub-groups, as with CPU offload.
    """
    whole = min(sub_group_size, max(partition, 1))
    if not elementwise:
        return whole
    budget = budget_slice_numel(partition=partition, state_tensors=state_tensors, buffer_count=buffer_count,
                                block_size=block_size)
    return min(whole, budget)
