"""Where gradients live between backward and step: one tensor per bucket, alive only while needed.

- when the policy does not shard gradients (stages 0-1): the bucket's whole gradient, laid
  out like its parameters; each `param.grad` becomes a view into it, so later micro-batches
  accumulate in place and the bucket is reduced with no copy;
- when it does (stages 2-3): only this rank's shard of the bucket; whole gradients exist
  only in the transient reduce buffers (see _reducer.py).

A bucket's tensor is allocated when backward first produces a gradient for it and freed
after the step (`release`, DeepSpeed's and torch's `zero_grad(set_to_none=True)`), so no
gradient memory is held during forward, when activations peak. `owned(i)` is the part of
bucket i that this rank's optimizer step reads.

With the optimizer offloaded, partitions are fp32 at the offload device, where the step
reads them (`lands_at_optimizer`): reduced gradients are added there during backward, and
the buffers persist and are zeroed after the step, since pinned host memory is costly to
allocate again every step.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from zero_plugins import Category

from ._homes import StateHomes
from ._layout import FlatLayout
from ._master import owned_range
from ._policy import StagePolicy


class GradBuckets:
    def __init__(
        self,
        layouts: Sequence[FlatLayout],
        rank: int,
        policy: StagePolicy,
        dtype: torch.dtype,
        homes: StateHomes,
    ) -> None:
        self.partitioned = policy.shards_gradients
        self.lands_at_optimizer = self.partitioned and homes.optimizer_offloaded
        self._layouts = list(layouts)
        self._rank = rank
        self._sharded_steps = policy.shards_optimizer_state
        self.dtype = dtype
        self.device = homes.device
        self._homes = homes
        self._tensors: list[torch.Tensor | None] = [None] * len(self._layouts)
        self._views: list[list[torch.Tensor]] = [[] for _ in self._layouts]

    def get(self, index: int) -> torch.Tensor:
        """Bucket `index`'s gradient tensor, allocated (zeroed) on first use."""
        tensor = self._tensors[index]
        if tensor is None:
            layout = self._layouts[index]
            if self.partitioned:
                tensor = self._homes.grad_partition(layout.shard_numel, self.dtype)
            else:
                numel = layout.padded_numel
                tensor = self._homes.ledger.new(
                    Category.GRAD_FULL, lambda: torch.zeros(numel, dtype=self.dtype, device=self.device))
                self._views[index] = [tensor[s.offset : s.offset + s.numel].view(s.shape) for s in layout.slots]
            self._tensors[index] = tensor
        return tensor

    def accumulate(self, index: int, reduced: torch.Tensor) -> None:
        """Add this rank's reduced slice of bucket `index`'s gradient (on the device) to its partition."""
        self._homes.grads_to_optimizer(self.get(index), reduced, accumulate=True)

    def owned(self, index: int) -> torch.Tensor:
        if self.partitioned:
            return self.get(index)
        lo, hi = owned_range(self._layouts[index], self._rank, self._sharded_steps)
        return self.get(index)[lo:hi]

    def take(self, index: int, slot_index: int, param: torch.nn.Parameter) -> None:
        """Whole gradients: make `param.grad` its view into the bucket, copying in a gradient autograd made afresh."""
        self.get(index)
        view = self._views[index][slot_index]
        if param.grad is not view:
            view.copy_(cast(torch.Tensor, param.grad))  # called from the post-accumulate-grad hook: it is set
            param.grad = view

    def attach(self) -> None:
        """Point `param.grad` at the allocated buckets' views again (after a `model.zero_grad()`)."""
        for index, views in enumerate(self._views):
            if self._tensors[index] is not None:
                for slot, view in zip(self._layouts[index].slots, views):
                    if slot.param.grad is not view:
                        slot.param.grad = view

    def release(self) -> None:
        """Free every bucket (and drop `param.grad`), as `zero_grad(set_to_none=True)` does; offloaded
        partitions are zeroed instead."""
        if self.lands_at_optimizer:
            self.zero()
            return
        for index, layout in enumerate(self._layouts):
            if self._tensors[index] is not None and not self.partitioned:
                for slot in layout.slots:
                    slot.param.grad = None
            self._tensors[index] = None
            self._views[index] = []

    def held(self) -> list[torch.Tensor]:
        """The bucket tensors allocated now (none between steps, except offloaded partitions)."""
        return [tensor for tensor in self._tensors if tensor is not None]

    def zero(self) -> None:
        for tensor in self._tensors:
            if tensor is not None:
                tensor.zero_()

    def __len__(self) -> int:
        return len(self._layouts)
