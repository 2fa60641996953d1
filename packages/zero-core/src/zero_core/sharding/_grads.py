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

Partitions live at the gradients' home (_homes.py): with the optimizer offloaded that is fp32
host memory at its device, where the step reads them: reduced gradients are added there
during backward, and the buffers persist and are zeroed after the step, since pinned host
memory is costly to allocate again every step. `for_step` hands the step the fp32 gradients
at that home: these tensors themselves when they are fp32 there, else copies.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import torch
from zero_plugins import Category

from ..accelerator import Transfer
from ._home import Home
from ._homes import Homes
from ._layout import FlatLayout
from ._master import owned_range
from ._policy import StagePolicy


class GradBuckets:
    def __init__(self, layouts: Sequence[FlatLayout], rank: int, policy: StagePolicy, dtype: torch.dtype,
                 homes: Homes) -> None:
        self.partitioned = policy.shards_gradients
        self._layouts = list(layouts)
        self._rank = rank
        self._sharded_steps = policy.shards_optimizer_state
        # Whole gradients (stages 0-1) live on the device, in the compute dtype, where autograd makes them.
        self._home: Home = homes.gradients if self.partitioned else homes.on_device
        self._stored_dtype = homes.gradient_dtype if self.partitioned else dtype
        self._step_home = homes.gradients
        self._read_in_place = self._home is self._step_home and self._stored_dtype == torch.float32
        self.dtype = dtype  # of the reduce buffers, on the device
        self.device = homes.device
        self._step_copies: list[torch.Tensor] = []  # fp32 copies the step reads, where the home keeps buffers
        self._tensors: list[torch.Tensor | None] = [None] * len(self._layouts)
        self._views: list[list[torch.Tensor]] = [[] for _ in self._layouts]
        # Which allocated tensors hold zeros only: the first reduced gradient is copied in, not added (offloaded,
        # an add is a copy in, an add on the device and a copy out: 4x the transfer of a 16-bit copy).
        self._zeroed: list[bool] = [False] * len(self._layouts)
        # step_in_backward (_backward_step.py): called with a bucket's index once its reduced gradient is in
        self.on_reduced: Callable[[int], None] | None = None

    def get(self, index: int) -> torch.Tensor:
        """Bucket `index`'s gradient tensor, allocated (zeroed) on first use."""
        tensor = self._tensors[index]
        if tensor is None:
            layout = self._layouts[index]
            if self.partitioned:
                tensor = self._home.allocate(layout.shard_numel, self._stored_dtype, Category.GRAD_PARTITION)
            else:
                tensor = self._home.allocate(layout.padded_numel, self._stored_dtype, Category.GRAD_FULL)
                self._views[index] = [tensor[s.offset : s.offset + s.numel].view(s.shape) for s in layout.slots]
            self._tensors[index] = tensor
            self._zeroed[index] = True
        return tensor

    def accumulate(self, index: int, reduced: torch.Tensor) -> Transfer:
        """Start adding this rank's reduced slice of bucket `index`'s gradient (on the device) to its partition;
        the write-back in flight holds `reduced` until it is complete (the step's boundary waits for it)."""
        stored = self.get(index)
        transfer = self._home.copy_in(stored, reduced, accumulate=not self._zeroed[index])
        self._zeroed[index] = False
        if self.on_reduced is not None:
            self.on_reduced(index)  # on the device, where step_in_backward runs: the add is complete
        return transfer

    def release_one(self, index: int) -> None:
        """Free one partition (step_in_backward, once its sub-groups have stepped)."""
        assert self.partitioned and not self._home.keeps_buffers, "step_in_backward frees device partitions"
        self._tensors[index] = None

    def owned(self, index: int) -> torch.Tensor:
        if self.partitioned:
            return self.get(index)
        lo, hi = owned_range(self._layouts[index], self._rank, sharded=self._sharded_steps)
        return self.get(index)[lo:hi]

    def take(self, index: int, slot_index: int, param: torch.nn.Parameter) -> None:
        """Whole gradients: make `param.grad` its view into the bucket, copying in a gradient autograd made afresh."""
        self.get(index)
        self._zeroed[index] = False  # written through its views, not through accumulate
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

    def for_step(self, owned: list[torch.Tensor], inv_scale: float) -> list[torch.Tensor]:
        """The fp32 gradient of each bucket's `owned` part at the step's home, multiplied by `inv_scale`.

        When the owned parts are not what the step reads, its fp32 copies are made (kept where the home keeps
        buffers, `optim.grad`) and the buckets are released before the step runs.
        """
        grads = owned
        if not self._read_in_place:
            copies = self._step_copies or [self._step_home.allocate(grad.numel(), torch.float32, Category.OPTIM_GRAD)
                                           for grad in grads]
            for copy, grad in zip(copies, grads):
                self._step_home.copy_in(copy, grad)
            self._step_home.synchronize()
            if self._step_home.keeps_buffers:
                self._step_copies = copies
            self.release()
            grads = copies
        return [grad.mul_(inv_scale) if inv_scale != 1.0 else grad for grad in grads]

    def release(self) -> None:
        """Free every bucket (and drop `param.grad`), as `zero_grad(set_to_none=True)` does; buckets at a home
        that keeps its buffers are zeroed instead."""
        if self._home.keeps_buffers:
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
        for index, tensor in enumerate(self._tensors):
            if tensor is not None:
                tensor.zero_()
                self._zeroed[index] = True

    def __len__(self) -> int:
        return len(self._layouts)
