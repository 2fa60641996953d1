"""Flat layouts: offsets, padding to equal non-empty shards, shard pieces, buckets."""
from __future__ import annotations

import pytest
import torch
from zero_core.engine import FlatLayout, split_into_buckets


def params(*sizes: int) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.zeros(size)) for size in sizes]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("sizes", [(1,), (3, 5), (10, 1, 6), (8,)])
def test_padding_is_under_one_element_per_rank_and_shards_are_equal(sizes: tuple[int, ...], world_size: int) -> None:
    layout = FlatLayout(params(*sizes), world_size)
    assert layout.numel == sum(sizes)
    assert layout.padded_numel == layout.shard_numel * world_size
    assert 0 <= layout.padding < world_size
    assert layout.shard_numel >= 1, "gloo aborts on empty gathers"


def test_a_layout_smaller_than_the_world_still_gives_every_rank_an_element() -> None:
    layout = FlatLayout(params(2), 4)
    assert (layout.shard_numel, layout.padded_numel, layout.padding) == (1, 4, 2)
    assert [len(layout.pieces_in(*layout.shard_range(rank))) for rank in range(4)] == [1, 1, 0, 0]


def test_shard_pieces_cover_every_element_once() -> None:
    layout = FlatLayout(params(5, 2, 6), 3)  # 13 elements -> shards of 5
    covered = []
    for rank in range(3):
        lo, _ = layout.shard_range(rank)
        for piece in layout.pieces_in(*layout.shard_range(rank)):
            assert piece.shard_offset == piece.slot.offset + piece.start - lo
            covered += [(piece.slot.offset + i) for i in range(piece.start, piece.stop)]
    assert covered == list(range(13))
    first = layout.pieces_in(*layout.shard_range(1))
    assert [(p.slot.offset, p.start, p.stop, p.shard_offset) for p in first] == [(5, 0, 2, 0), (7, 0, 3, 2)]


def test_buckets_keep_order_and_size_and_a_large_param_goes_alone() -> None:
    ps = params(3, 3, 10, 2, 2, 2)
    buckets = split_into_buckets(ps, 6)
    assert [[p.numel() for p in b] for b in buckets] == [[3, 3], [10], [2, 2, 2]]
    assert [p for b in buckets for p in b] == ps


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one parameter"):
        FlatLayout([], 2)
    with pytest.raises(ValueError, match="rank 2 is outside 0..1"):
        FlatLayout(params(4), 2).shard_range(2)
    with pytest.raises(ValueError, match="bucket size"):
        split_into_buckets(params(4), 0)
