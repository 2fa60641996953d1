"""Gradient reduction in buckets, driven by post-accumulate-grad hooks during backward.

The stage policy's `GradReduction` says how:
- ALL_REDUCE_AT_BOUNDARY (stage 0): all-reduce each bucket of the whole gradients, at the
  accumulation boundary only;
- REDUCE_SCATTER_AT_BOUNDARY (stage 1): reduce-scatter each bucket in place, at the boundary
  only; this rank's shard of the bucket's gradient then holds the averaged gradient it steps with;
- REDUCE_SCATTER_EVERY_BACKWARD (stages 2-3): on every backward, copy each gradient into its
  bucket's transient buffer as soon as autograd makes it and drop `param.grad`; a full
  bucket is reduce-scattered and this rank's slice added to its gradient partition, then
  the buffer is freed. Holding whole gradients until the boundary would cost 2P bytes and
  break stage 2's contract, so this reduces on every micro-batch, as DeepSpeed does.

Buckets are launched strictly in one order on every rank (a bucket waits for those before
it), so collectives match across ranks even when ranks see different unused parameters.
With `overlap_comm` the collectives are asynchronous and run while backward continues;
reduction in every backward keeps at most one in flight, which bounds its buffers. Stage 3
passes its one bucket per unit packed into fewer collectives (_packed_bucket.py).

Adding a reduced slice to a partition in host memory (an offloaded optimizer) is a copy in
flight that holds the reduce buffer it reads. Nothing waits for it when it starts: the device
waits for it when the next bucket's buffer is allocated (the host never does), so it overlaps
the backward in between and no more buffers are alive than without offload; the step's
boundary waits for the last ones.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import cast

import torch
from zero_plugins import Category, ZeroError

from ..accelerator import Transfer
from ..comm import Collectives, Work
from ..memory import MemoryLedger
from ._bucket import ReduceBucket, WholeGradBucket
from ._names import param_name
from ._policy import GradReduction

_EVERY_BACKWARD = GradReduction.REDUCE_SCATTER_EVERY_BACKWARD


class GradReducer:
    def __init__(
        self,
        buckets: Sequence[ReduceBucket],
        comm: Collectives,
        reduction: GradReduction,
        ledger: MemoryLedger,
        *,
        overlap: bool,
    ) -> None:
        if reduction is not _EVERY_BACKWARD:
            for bucket in buckets:
                if not isinstance(bucket, WholeGradBucket):
                    raise TypeError(f"{reduction.value} needs buckets that keep whole gradients, got {bucket!r}")
        self._buckets = list(buckets)  # in launch order
        self._comm = comm
        self._reduction = reduction
        self._overlap = overlap
        self._ledger = ledger
        self._next = 0
        self._inflight: list[tuple[ReduceBucket, Work]] = []
        self._written: list[Transfer] = []  # write-backs of completed buckets, until the next buffer is allocated
        self._active = False
        self._reducing = False
        self.received = 0  # gradients that reached a trainable parameter in this backward (none: the loss is unrelated)
        self._handles = [
            slot.param.register_post_accumulate_grad_hook(functools.partial(self._on_grad, bucket, index))
            for bucket in self._buckets
            for index, slot in enumerate(bucket.slots)
        ]

    def begin(self, *, reduce: bool) -> None:
        """Start one backward; `reduce` is False on micro-batches before the accumulation boundary."""
        self._active = True
        self._reducing = reduce or self._reduction is _EVERY_BACKWARD
        self._next = 0
        self.received = 0
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
            self._let_go()
        finally:
            self._active = False

    def abort(self) -> None:
        """After a backward that raised: drop the half-done reduction so the next backward starts clean.

        The collectives already launched are waited for (their errors dropped: the backward's own error is the
        one that propagates): the peers launched the same ones, and a process that exits with collectives still
        in flight can die in the backend (SIGABRT) instead of with its exception.
        """
        for _, work in self._inflight:
            with contextlib.suppress(Exception):
                work.wait()
        self._inflight.clear()
        self._let_go()
        for bucket in self._buckets:
            bucket.buffer = None
        self._active = False

    def remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _on_grad(self, bucket: ReduceBucket, index: int, param: torch.nn.Parameter) -> None:
        if not self._active:
            raise ZeroError("a gradient was computed outside engine.backward(); call engine.backward(loss), "
                            "not loss.backward(), so the engine can reduce gradients")
        self.received += 1
        if self._reduction is not _EVERY_BACKWARD:
            _whole(bucket).take_grad(index, param)
            if not self._reducing:
                return  # before the boundary: the gradient just stays in its bucket
        if bucket.launched:
            raise ZeroError(
                f"parameter {param_name(param)} received a second gradient after its bucket was "
                "reduced in this backward (e.g. reentrant checkpointing of a shared parameter); "
                "use non-reentrant checkpointing (use_reentrant=False)"
            )
        if self._reduction is _EVERY_BACKWARD:
            # a second arrival is a second use of the parameter within one backward: it adds
            grad = cast(torch.Tensor, param.grad)  # a post-accumulate-grad hook runs once autograd has set it
            bucket.write(self._buffer(bucket), index, grad.reshape(-1), accumulate=index in bucket.arrived)
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

    def _launch(self, bucket: ReduceBucket) -> None:
        comm, world = self._comm, self._comm.world_size
        bucket.launched = True
        if self._reduction is _EVERY_BACKWARD:
            self._drain(0)  # one bucket in flight at a time bounds the buffers
            buffer = self._buffer(bucket)
            buffer.div_(world)  # average before summing: fp16 sums of N gradients could overflow
            lo, hi = bucket.shard_range(comm.rank)
            work = comm.reduce_scatter(buffer[lo:hi], buffer, async_op=self._overlap)
        else:
            whole = _whole(bucket)
            full = whole.whole_grad()
            full.div_(world)
            if self._reduction is GradReduction.ALL_REDUCE_AT_BOUNDARY:
                work = comm.all_reduce(full, async_op=self._overlap)
            else:
                work = comm.reduce_scatter(whole.owned_grad(), full, async_op=self._overlap)
        if work is None:
            self._complete(bucket)
        else:
            self._inflight.append((bucket, work))

    def _drain(self, keep: int) -> None:
        while len(self._inflight) > keep:
            bucket, work = self._inflight.pop(0)
            work.wait()
            self._complete(bucket)

    def _complete(self, bucket: ReduceBucket) -> None:
        if self._reduction is not _EVERY_BACKWARD:
            return
        assert bucket.buffer is not None
        self._written += bucket.complete(bucket.buffer, self._comm.rank)
        bucket.buffer = None  # frees it, or the write-back does once the device has waited for it (_let_go)

    def _buffer(self, bucket: ReduceBucket) -> torch.Tensor:
        if bucket.buffer is None:
            self._let_go()  # the earlier buffer's memory can make this one
            bucket.buffer = self._ledger.new(Category.GRAD_BUCKET, bucket.new_buffer)
        return bucket.buffer

    def _let_go(self) -> None:
        """The device (never the host) waits for the write-backs issued so far, which then let go of their buffers."""
        written, self._written = self._written, []
        for transfer in written:
            transfer.wait()


def _whole(bucket: ReduceBucket) -> WholeGradBucket:
    assert isinstance(bucket, WholeGradBucket)  # checked for every bucket in GradReducer.__init__
    return bucket
