"""Where gradients live between backward and step.

- FullGrads (stages 0-1): one flat buffer laid out like the parameters; each `param.grad`
  is a view into it, so autograd accumulates micro-batches in place and a bucket is a
  plain slice, with no copy.
- PartitionedGrads (stage 2): only this rank's shard of each bucket; full gradients exist
  only in the transient reduce buckets (see _reducer.py).

`owned[i]` is the part of bucket i that this rank's optimizer step reads.
"""
from __future__ import annotations

import torch

from ..memory.ledger import MemoryLedger
from ._flat_params import FlatParams
from ._master import owned_range


class FullGrads:
    def __init__(self, flat: FlatParams, rank: int, sharded: bool, ledger: MemoryLedger) -> None:
        self.buffer = ledger.new("grad.full", lambda: torch.zeros_like(flat.buffer))
        self._views: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        self.buckets: list[torch.Tensor] = []
        self.owned: list[torch.Tensor] = []
        for index, (layout, start) in enumerate(zip(flat.layouts, flat.starts)):
            bucket = self.buffer[start : start + layout.padded_numel]
            self.buckets.append(bucket)
            lo, hi = owned_range(layout, rank, sharded)
            self.owned.append(bucket[lo:hi])
            for slot in layout.slots:
                self._views.append((slot.param, bucket[slot.offset : slot.offset + slot.numel].view(slot.shape)))
        self.attach()

    def attach(self) -> None:
        """Point every `param.grad` at its view again (after a `model.zero_grad()` set them to None)."""
        for param, view in self._views:
            if param.grad is not view:
                param.grad = view

    def zero(self) -> None:
        self.buffer.zero_()


class PartitionedGrads:
    def __init__(self, flat: FlatParams, rank: int, ledger: MemoryLedger) -> None:
        sizes = [layout.shard_numel for layout in flat.layouts]
        self.buffer = ledger.new(
            "grad.partition", lambda: torch.zeros(sum(sizes), dtype=flat.buffer.dtype, device=flat.buffer.device)
        )
        self.owned: list[torch.Tensor] = list(torch.split(self.buffer, sizes))

    def attach(self) -> None:
        """Stage 2 keeps no `param.grad`: the reducer takes each gradient as soon as autograd makes it."""

    def zero(self) -> None:
        self.buffer.zero_()
