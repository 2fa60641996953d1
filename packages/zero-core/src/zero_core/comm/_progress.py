"""Where each rank is in training, posted to the process group's store, so that a rank whose collective fails
can say which peer it waited on and where that peer was last seen.

Each rank posts at the start of initialize, of each phase (forward, backward, step) and when the engine
raises; reading the others' posts happens only after a collective has failed. Posting is best-effort: a
store that cannot be reached (its host rank died) never turns into an error of its own.
"""
from __future__ import annotations

import time

import torch.distributed as dist
from torch._C._distributed_c10d import Store

_KEY = "zero/progress/{rank}"


class RankProgress:
    """This rank's position ("step 3, backward"), kept locally and posted to the default store."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.where = "initialize"
        self._store = _default_store() if world_size > 1 else None
        self.post("initialize")

    def post(self, where: str) -> None:
        self.where = where
        if self._store is not None:
            try:
                self._store.set(_KEY.format(rank=self.rank), f"{time.time():.3f}|{where}")
            except Exception:  # the store's host is gone: the failing collective will say so
                self._store = None

    def peers(self) -> dict[int, tuple[str, float]]:
        """Every other rank's last post: (where, seconds ago); ranks that never posted or cannot be read are left out."""
        if self._store is None:
            return {}
        seen: dict[int, tuple[str, float]] = {}
        for rank in range(self.world_size):
            if rank == self.rank:
                continue
            key = _KEY.format(rank=rank)
            try:
                if not self._store.check([key]):
                    continue
                stamp, _, where = self._store.get(key).decode().partition("|")
            except Exception:
                return seen
            seen[rank] = (where, time.time() - float(stamp))
        return seen


def _default_store() -> Store | None:
    try:
        store: Store = dist.distributed_c10d._get_default_store()
        return store
    except (RuntimeError, ValueError, AttributeError):
        return None
