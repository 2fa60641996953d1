"""What a rank holds of each checkpoint key, and how it becomes DCP state-dict values.

A key's pieces are views of memory (`part`), the whole tensor (`whole`), or pieces that are
not in memory (`lazy`: in swap files), each with a function that reads it and one that
writes it. For a save, a lazy piece is a meta-device shard whose data `LazySavePlanner`
reads only when DCP writes it; for a load, lazy keys are read in batches into plain
tensors (`lazy_batches`) and written back piece by piece, so neither holds more than a batch.
"""
from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch.distributed._shard.metadata import ShardMetadata
from torch.distributed._shard.sharded_tensor.api import ShardedTensor
from torch.distributed._shard.sharded_tensor.shard import Shard
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.planner import SavePlan, WriteItem

Entry = torch.Tensor | ShardedTensor
_BATCH_NUMEL = 1 << 24  # elements of the lazy keys read per load call: 64 MiB of fp32 at most


@dataclass
class LazyPiece:
    start: int
    length: int
    read: Callable[[], torch.Tensor]  # the piece's values, as a new tensor
    write: Callable[[torch.Tensor], None]  # store the piece's new values where it lives


@dataclass
class _Pieces:
    numel: int
    dtype: torch.dtype = torch.float32
    whole: torch.Tensor | None = None  # held whole on every rank
    parts: list[tuple[int, torch.Tensor]] = field(default_factory=list)  # (first element, 1-D view)
    lazy: list[LazyPiece] | None = None  # not None: the key lives out of memory (on every rank)


class EntryBuilder:
    """Collects, per checkpoint key, the pieces this rank holds; `entries()` makes them DCP state-dict values."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._pieces: dict[str, _Pieces] = {}

    def whole(self, key: str, values: torch.Tensor) -> None:
        self._pieces[key] = _Pieces(values.numel(), values.dtype, whole=values.reshape(-1))

    def part(self, key: str, numel: int, start: int, values: torch.Tensor) -> None:
        pieces = self._pieces.setdefault(key, _Pieces(numel, values.dtype))
        if values.numel():
            pieces.parts.append((start, values))

    def declare(self, key: str, numel: int, dtype: torch.dtype = torch.float32, lazy: bool = False) -> None:
        """A sharded key this rank may hold nothing of (every rank must take part in making each ShardedTensor);
        `lazy`: its pieces are out of memory on every rank."""
        pieces = self._pieces.setdefault(key, _Pieces(numel, dtype))
        if lazy and pieces.lazy is None:
            pieces.lazy = []

    def lazy(self, key: str, piece: LazyPiece) -> None:
        lazy = self._pieces[key].lazy
        assert lazy is not None, f"{key} was not declared lazy"
        if piece.length:
            lazy.append(piece)

    def keys(self) -> list[str]:
        return list(self._pieces)

    def entries(self, with_lazy: bool = True) -> dict[str, Entry]:
        """In key order, the same on every rank: making a ShardedTensor is a collective. Lazy keys are meta-device
        shards (for a save, with LazySavePlanner); `with_lazy=False` leaves them out (a load reads them apart)."""
        out: dict[str, Entry] = {}
        for key in sorted(self._pieces):
            pieces = self._pieces[key]
            if pieces.whole is not None:
                out[key] = pieces.whole
            elif pieces.lazy is not None:
                if with_lazy:
                    shards = [Shard(torch.empty(p.length, dtype=pieces.dtype, device="meta"),
                                    ShardMetadata([p.start], [p.length], f"rank:{self.rank}/meta"))
                              for p in pieces.lazy]
                    out[key] = ShardedTensor._init_from_local_shards(shards, [pieces.numel])
            else:
                shards = [Shard(v, ShardMetadata([start], [v.numel()], f"rank:{self.rank}/{v.device.type}"))
                          for start, v in pieces.parts]
                out[key] = ShardedTensor._init_from_local_shards(shards, [pieces.numel])
        return out

    def save_planner(self, snapshot: threading.Event | None = None) -> LazySavePlanner:
        readers = {(key, piece.start): piece.read for key, pieces in self._pieces.items()
                   for piece in pieces.lazy or []}
        return LazySavePlanner(readers, snapshot)

    def lazy_batches(self, saved: set[str]) -> Iterator[tuple[dict[str, torch.Tensor], Callable[[], None]]]:
        """For a load: batches of lazy keys (the same batches on every rank) as plain tensors to load into, each
        with the function that then writes this rank's pieces from them."""
        keys = sorted(k for k, p in self._pieces.items() if p.lazy is not None and k in saved)
        batch: list[str] = []
        size = 0
        for key in keys:
            batch.append(key)
            size += self._pieces[key].numel
            if size >= _BATCH_NUMEL:
                yield self._batch(batch)
                batch, size = [], 0
        yield self._batch(batch)  # every rank yields the same number of batches, the last maybe empty

    def _batch(self, keys: list[str]) -> tuple[dict[str, torch.Tensor], Callable[[], None]]:
        local = {key: self._pieces[key] for key in keys if self._pieces[key].lazy}
        targets = {key: torch.empty(p.numel, dtype=p.dtype) for key, p in local.items()}

        def write() -> None:
            for key, pieces in local.items():
                for piece in pieces.lazy or []:
                    piece.write(targets[key][piece.start : piece.start + piece.length])

        return targets, write


class LazySavePlanner(DefaultSavePlanner):
    """Reads each lazy piece when DCP writes it, so a save of swapped state holds one piece at a time.

    With `snapshot` (an asynchronous save), every tensor is copied as DCP takes it, and the event is set
    once all of this rank's are copied: from then on the engine may change its buffers (the next step
    waits for it), while the copies are still being written."""

    def __init__(self, readers: dict[tuple[str, int], Callable[[], torch.Tensor]],
                 snapshot: threading.Event | None = None) -> None:
        super().__init__()
        self._readers = readers
        self._snapshot = snapshot
        self._remaining = 0

    def finish_plan(self, new_plan: SavePlan) -> SavePlan:
        plan = super().finish_plan(new_plan)
        self._remaining = len(plan.items)
        if self._snapshot is not None and self._remaining == 0:
            self._snapshot.set()
        return plan

    def resolve_data(self, write_item: WriteItem) -> torch.Tensor | io.BytesIO:
        offset = write_item.index.offset
        read = self._readers.get((write_item.index.fqn, int(offset[0]) if offset is not None else -1))
        data = read() if read is not None else super().resolve_data(write_item)
        if self._snapshot is not None:
            if isinstance(data, torch.Tensor) and read is None:
                data = data.clone()  # the engine's own buffer: the next step will change it
            self._remaining -= 1
            if self._remaining == 0:
                self._snapshot.set()
        return data
