"""Inside `zero_core.Init`, every rank must build the same modules in the same order: each unit's broadcast
and partition is a collective. Before each unit, and at the end of the block, the ranks all-gather three
integers (what is checked, how many units so far, a digest of the unit's name, shapes and dtypes); a
difference fails on every rank with the unit and the ranks that differ, not a hang or a mismatched copy."""
from __future__ import annotations

import hashlib

import torch
import torch.distributed as dist

from ..comm import Collectives, RankMismatch

_UNIT, _END = 1, 2


class InitAgreement:
    def __init__(self, comm: Collectives, device: torch.device) -> None:
        self._comm = comm
        self._device = device
        self._units = 0

    def unit(self, name: str, params: list[torch.nn.Parameter]) -> None:
        shapes = ", ".join(f"{tuple(p.shape)} {str(p.dtype).removeprefix('torch.')}" for p in params)
        self._check(_UNIT, f"unit {self._units} ({name}: {shapes})")
        self._units += 1

    def end(self) -> None:
        self._check(_END, f"the end of the Init block after {self._units} units")

    def _check(self, kind: int, description: str) -> None:
        world = self._comm.world_size
        if world == 1:
            return
        digest = int.from_bytes(hashlib.sha256(description.encode()).digest()[:7], "little")
        mine = torch.tensor([kind, self._units, digest], dtype=torch.int64, device=self._device)
        everyone = torch.empty(3 * world, dtype=torch.int64, device=self._device)
        self._comm.all_gather(everyone, mine)
        rows = everyone.view(world, 3).tolist()
        if all(row == rows[0] for row in rows):
            return
        descriptions: list[object] = [None] * world
        dist.all_gather_object(descriptions, description)  # only on a difference: the words to say it with
        others = [rank for rank, row in enumerate(rows) if row != rows[0]]
        raise RankMismatch(f"zero_core.Init: the ranks built different models (ranks {others} differ from rank 0): "
                           f"rank 0 was at {descriptions[0]}, rank {others[0]} at {descriptions[others[0]]}; every "
                           "rank must build the same model inside Init")
