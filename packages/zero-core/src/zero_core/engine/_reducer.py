"""Gradient reduction in buckets, driven by post-accumulate-grad hooks during backward.

- stage 0: all-reduce each bucket of the full gradients, at the accumulation boundary only;
- stage 1: reduce-scatter each bucket in place, at the boundary only; this rank's shard of the
  bucket's gradient then holds the averaged gradient it steps with;
- stage 2: on every backward, copy each gradient into its bucket's transient buffer as soon
  as autograd makes it and drop `param.grad`; a full bucket is reduce-scattered and this
  rank's slice added to its gradient partition, then the buffer is freed. Holding full
  gradients until the boundary would cost 2P bytes and break stage 2's contract, so stage 2
  reduces on every micro-batch, as DeepSpeed does.

Buckets are launched strictly in one order on every rank (a bucket waits for those before
it), so collectives match across ranks even when ranks see different unused parameters.
With `overlap_comm` the collectives are asynchronous and run while backward continues;
stage 2 keeps at most one in flight, which bounds its buffers. Stage 3 passes its one
bucket per unit packed into fewer collectives (_packed_bucket.py).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from zero_plugins import ZeroError

from ..memory.ledger import MemoryLedger
from ._collectives import Collectives, Work
from ._grads import GradBuckets
from ._layout import FlatLayout, Slot

if TYPE_CHECKING:
    from ._packed_bucket import PackedBucket


@dataclass(eq=False)
class ReduceBucket:
    layout: FlatLayout
    grads: GradBuckets  # the group's gradients; this bucket is number `index` there
    index: int
    buffer: torch.Tensor | None = None  # stage 2: the full-size gradient, while filling and reducing
    arrived: set[int] = field(default_factory=set)
    launched: bool = False

    @property
    def slots(self) -> list[Slot]:
        return self.layout.slots

    def new_buffer(self) -> torch.Tensor:
        """Stage 2: a zeroed full-size gradient buffer (padding and unused parameters stay zero)."""
        return torch.zeros(self.layout.padded_numel, dtype=self.grads.dtype, device=self.grads.device)

    def write(self, buffer: torch.Tensor, index: int, grad: torch.Tensor, accumulate: bool) -> None:
        """Put slot `index`'s flattened gradient in its place in `buffer` (or add it there)."""
        slot = self.layout.slots[index]
        target = buffer[slot.offset : slot.offset + slot.numel]
        if accumulate:
            target.add_(grad)
        else:
            target.copy_(grad)

    def shard_range(self, rank: int) -> tuple[int, int]:
        return self.layout.shard_range(rank)

    def complete(self, buffer: torch.Tensor, rank: int) -> None:
        """Add this rank's reduced shard of `buffer` to its gradient partition."""
        lo, hi = self.layout.shard_range(rank)
        self.grads.get(self.index).add_(buffer[lo:hi])


class GradReducer:
    def __init__(
        self,
        buckets: Sequence[ReduceBucket | PackedBucket],
        comm: Collectives,
        stage: int,
        overlap: bool,
        ledger: MemoryLedger,
    ) -> None:
        self._buckets = list(buckets)  # in launch order
        self._comm = comm
        self._stage = stage
        self._overlap = overlap
        self._ledger = ledger
        self._next = 0
        self._inflight: list[tuple[ReduceBucket | PackedBucket, Work]] = []
        self._active = False
        self._reducing = False
        self._handles = [
            slot.param.register_post_accumulate_grad_hook(functools.partial(self._on_grad, bucket, index))
            for bucket in self._buckets
            for index, slot in enumerate(bucket.slots)
        ]

    def begin(self, reduce: bool) -> None:
        """Start one backward; `reduce` is False on micro-batches before the accumulation boundary."""
        self._active = True
        self._reducing = reduce or self._stage == 2
        self._next = 0
        for bucket in self._buckets:
            bucket.arrived.clear()
            bucket.launched = False

    def end(self) -> None:
        """Reduce what is left (buckets with unused parameters) and wait for every collective."""
        try:
            if self._reducing:
                while self._next < len(self._buckets):
                    self._launch(self._buckets[self._next])
                    self._next += 1
                self._drain(0)
        finally:
            self._active = False

    def abort(self) -> None:
        """After a backward that raised: drop the half-done reduction so the next backward starts clean."""
        self._inflight.clear()
        for bucket in self._buckets:
            bucket.buffer = None
        self._active = False

    def remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _on_grad(self, bucket: ReduceBucket | PackedBucket, index: int, param: torch.nn.Parameter) -> None:
        if not self._active:
            raise ZeroError("a gradient was computed outside engine.backward(); call engine.backward(loss), "
                            "not loss.backward(), so the engine can reduce gradients")
        if self._stage != 2:
            bucket.grads.take(bucket.index, index, param)
            if not self._reducing:
                return  # stages 0-1 before the boundary: the gradient just stays in its bucket
        if bucket.launched:
            raise ZeroError(
                f"a parameter of shape {tuple(param.shape)} received a second gradient after its bucket was "
                "reduced in this backward (e.g. reentrant checkpointing of a shared parameter); "
                "use non-reentrant checkpointing (use_reentrant=False)"
            )
        if self._stage == 2:
            # a second arrival is a second use of the parameter within one backward: it adds
            bucket.write(self._buffer(bucket), index, param.grad.reshape(-1), index in bucket.arrived)
            param.grad = None
        bucket.arrived.add(index)
        if len(bucket.arrived) == len(bucket.slots):
            self._launch_ready()

    def _launch_ready(self) -> None:
        while self._next < len(self._buckets):
            bucket = self._buckets[self._next]
            if len(bucket.arrived) < len(bucket.slots):
                return
            self._launch(bucket)
            self._next += 1

    def _launch(self, bucket: ReduceBucket | PackedBucket) -> None:
        comm, world = self._comm, self._comm.world_size
        bucket.launched = True
        if self._stage == 2:
            self._drain(0)  # one bucket in flight at a time bounds the buffers
            buffer = self._buffer(bucket)
            buffer.div_(world)  # average before summing: fp16 sums of N gradients could overflow
            lo, hi = bucket.shard_range(comm.rank)
            work = comm.reduce_scatter(buffer[lo:hi], buffer, async_op=self._overlap)
        else:
            full = bucket.grads.get(bucket.index)
            full.div_(world)
            if self._stage == 0:
                work = comm.all_reduce(full, async_op=self._overlap)
            else:
                work = comm.reduce_scatter(bucket.grads.owned(bucket.index), full, async_op=self._overlap)
        if work is None:
            self._complete(bucket)
        else:
            self._inflight.append((bucket, work))

    def _drain(self, keep: int) -> None:
        while len(self._inflight) > keep:
            bucket, work = self._inflight.pop(0)
            work.wait()
            self._complete(bucket)

    def _complete(self, bucket: ReduceBucket | PackedBucket) -> None:
        if self._stage != 2:
            return
        assert bucket.buffer is not None
        bucket.complete(bucket.buffer, self._comm.rank)
        bucket.buffer = None  # frees it: nothing else refers to the buffer

    def _buffer(self, bucket: ReduceBucket | PackedBucket) -> torch.Tensor:
        if bucket.buffer is None:
            bucket.buffer = self._ledger.new("grad.bucket", bucket.new_buffer)
        return bucket.buffer
