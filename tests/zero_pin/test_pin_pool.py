"""zero_pin.empty_pinned, PinnedPool and pin_activity: buffers born pinned, reused once their views die, counted."""
from __future__ import annotations

import torch
import zero_pin


def _activity_since(before: zero_pin.PinActivity) -> zero_pin.PinActivity:
    return zero_pin.pin_activity() - before


def test_empty_pinned_is_one_allocation_and_no_copy() -> None:
    before = zero_pin.pin_activity()
    buffer = zero_pin.empty_pinned(100, torch.float32)
    assert buffer.shape == (100,) and buffer.dtype == torch.float32
    assert _activity_since(before) == zero_pin.PinActivity(allocations=1, allocated_bytes=400)


def test_pin_memory_with_a_copy_counts_the_copy() -> None:
    before = zero_pin.pin_activity()
    source = torch.arange(10, dtype=torch.float64)
    pinned = zero_pin.pin_memory(source)
    assert torch.equal(pinned, source)
    assert _activity_since(before) == zero_pin.PinActivity(1, 80, 1, 80)


def test_a_block_is_reused_only_once_every_view_of_it_died() -> None:
    pool = zero_pin.PinnedPool()
    first = pool.empty_like(torch.empty(4, 8))
    view = first.t()
    del first
    second = pool.empty_like(torch.empty(4, 8))  # the transposed view still holds the first block
    assert pool.created == 2
    address = view.untyped_storage().data_ptr()
    del view
    before = zero_pin.pin_activity()
    third = pool.empty_like(torch.empty(8, 4))  # same bytes, another shape: the first block again
    assert pool.created == 2 and third.untyped_storage().data_ptr() == address
    assert _activity_since(before) == zero_pin.PinActivity()
    assert second.untyped_storage().data_ptr() != address


def test_empty_like_keeps_dense_strides_and_makes_others_contiguous() -> None:
    pool = zero_pin.PinnedPool()
    transposed = torch.empty(3, 5).t()
    assert pool.empty_like(transposed).stride() == transposed.stride()
    sliced = torch.empty(6, 5)[::2]  # gaps between rows: a contiguous copy
    copy = pool.empty_like(sliced)
    assert copy.shape == sliced.shape and copy.is_contiguous()


def test_trim_drops_the_blocks_nobody_took_since_the_last_trim() -> None:
    pool = zero_pin.PinnedPool()
    kept = pool.empty_like(torch.empty(16))
    idle = pool.empty_like(torch.empty(32))
    del idle
    assert pool.trim() == 0  # both were taken since the (first) trim
    assert pool.trim() == 128  # the free 32-float block stayed idle; the one in use stays
    assert pool.held_bytes() == kept.numel() * 4


def test_the_native_backend_hands_out_born_pinned_blocks(native: zero_pin.PinBackend) -> None:
    buffer = native.empty(1000, torch.bfloat16)
    assert buffer.shape == (1000,) and native.is_pinned(buffer)
    pool = zero_pin.PinnedPool(lambda nbytes: native.empty(nbytes, torch.uint8))
    host = pool.empty_like(torch.empty(10, 10))
    assert native.is_pinned(host)
