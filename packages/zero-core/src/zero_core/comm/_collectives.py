"""The collectives the engine uses, each counted in the ledger's `comm` figures.

Bytes sent per rank are counted as the ring algorithm sends them, whatever algorithm the
backend picks (docs/engine.md, "Communication"): for N ranks and a payload of B bytes,
all-reduce sends 2(N-1)/N * B, reduce-scatter (B = its input) and all-gather (B = its
output) send (N-1)/N * B, and a broadcast sends B from the source only.

On gloo they run through _gloo.py, so that the memory a collective uses is allocated and freed at the same
points of the rank's own thread every run; NCCL's run as torch.distributed has them.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Literal, overload

import torch
import torch.distributed as dist

from ..accelerator import get_accelerator
from ..memory import MemoryLedger
from . import _gloo
from ._failure import guarded
from ._process_group import is_fake_group
from ._progress import RankProgress

# torch 2.13 renamed the single-tensor collectives; older releases only have the old names.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class Work:
    """An asynchronous collective's handle: `wait()` raises CollectiveFailed (naming the collective, where in
    training it was launched and the peers it waited on) instead of the backend's bare error. On gloo it also
    finishes the collective (a reduce-scatter's chunk copied out) and returns once gloo has let go of its tensors,
    so that what the rank frees next is freed at once."""

    def __init__(self, works: list[dist.Work], op: str, progress: RankProgress,
                 then: Callable[[], None] | None = None) -> None:
        self._works, self._op, self._progress, self._then = works, op, progress, then

    def wait(self) -> None:
        with guarded(self._op, self._progress):
            while self._works:  # popped, never named: gloo's work objects hold the tensors for as long as they live
                self._works.pop(0).wait()
        then, self._then = self._then, None  # a reduce-scatter's copy dies with it, as this returns
        if then is not None:
            then()


class Collectives:
    """Collectives over one process group; `async_op=True` returns a handle to wait on.

    A collective that times out or loses a peer raises CollectiveFailed, whose message names the
    collective, this rank's place in training (`progress.where`, which the engine posts) and the peers.
    """

    def __init__(self, ledger: MemoryLedger, group: dist.ProcessGroup | None = None) -> None:
        self.ledger = ledger
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.progress = RankProgress(self.rank, self.world_size)
        modelled = is_fake_group(group)  # a dry run: the backend is the one its accelerator stands for
        backend = get_accelerator().communication_backend_name() if modelled else str(dist.get_backend(group))
        self._gloo = backend == "gloo"  # reduce-scatters through a copy of ours (_gloo.reduce_scatter)
        self._gloo_thread = self._gloo and not modelled  # a real gloo worker thread, to wait for (_gloo.Handover)

    # torch's collectives are unannotated: they return a Work handle with async_op=True, else None.
    @overload
    def all_reduce(self, tensor: torch.Tensor, op: dist.ReduceOp.RedOpType = ..., *,
                   async_op: Literal[True]) -> Work: ...
    @overload
    def all_reduce(self, tensor: torch.Tensor, op: dist.ReduceOp.RedOpType = ...,
                   async_op: Literal[False] = ...) -> None: ...
    @overload
    def all_reduce(self, tensor: torch.Tensor, op: dist.ReduceOp.RedOpType = ...,
                   async_op: bool = ...) -> Work | None: ...

    def all_reduce(self, tensor: torch.Tensor, op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM,
                   async_op: bool = False) -> Work | None:
        size = _nbytes(tensor)
        self._count("all_reduce", size, 2 * (self.world_size - 1) * size // self.world_size)
        if not self._gloo_thread:
            with guarded("all_reduce", self.progress):
                work = dist.all_reduce(tensor, op=op, group=self.group, async_op=async_op)
            return self._handle(_launched(work), "all_reduce", async_op)
        handover = _gloo.Handover("all_reduce")
        with guarded("all_reduce", self.progress):
            works = [dist.all_reduce(handover(tensor), op=op, group=self.group, async_op=True)]
        return self._handle(works, "all_reduce", async_op, handover.settle)

    @overload
    def reduce_scatter(self, output: torch.Tensor, input: torch.Tensor, *, async_op: Literal[True]) -> Work: ...
    @overload
    def reduce_scatter(self, output: torch.Tensor, input: torch.Tensor, async_op: Literal[False] = ...) -> None: ...
    @overload
    def reduce_scatter(self, output: torch.Tensor, input: torch.Tensor, async_op: bool = ...) -> Work | None: ...

    def reduce_scatter(self, output: torch.Tensor, input: torch.Tensor, async_op: bool = False) -> Work | None:
        """Sum `input` (N equal chunks) across ranks; this rank's chunk of the sum lands in `output`.

        `output` may be this rank's own chunk of `input` (in place).
        """
        size = _nbytes(input)
        self._count("reduce_scatter", size, (self.world_size - 1) * size // self.world_size)
        if not self._gloo:
            with guarded("reduce_scatter", self.progress):
                work = _reduce_scatter_single(output, input, group=self.group, async_op=async_op)
            return self._handle(_launched(work), "reduce_scatter", async_op)
        handover = _gloo.Handover("reduce_scatter", waits=self._gloo_thread)
        with guarded("reduce_scatter", self.progress):
            works, take_chunk = _gloo.reduce_scatter(output, input, self.group, self.rank, self.world_size,
                                                     self.ledger, handover)

        def then() -> None:
            take_chunk()
            handover.settle()

        return self._handle(works, "reduce_scatter", async_op, then)

    @overload
    def all_gather(self, output: torch.Tensor, input: torch.Tensor, *, async_op: Literal[True]) -> Work: ...
    @overload
    def all_gather(self, output: torch.Tensor, input: torch.Tensor, async_op: Literal[False] = ...) -> None: ...
    @overload
    def all_gather(self, output: torch.Tensor, input: torch.Tensor, async_op: bool = ...) -> Work | None: ...

    def all_gather(self, output: torch.Tensor, input: torch.Tensor, async_op: bool = False) -> Work | None:
        """Concatenate every rank's `input` into `output`; `input` may be this rank's chunk of `output`."""
        size = _nbytes(output)
        self._count("all_gather", size, (self.world_size - 1) * size // self.world_size)
        if not self._gloo_thread:  # a dry run's fake group moves and stages nothing, whatever backend it stands for
            with guarded("all_gather", self.progress):
                work = _all_gather_single(output, input, group=self.group, async_op=async_op)
            return self._handle(_launched(work), "all_gather", async_op)
        handover = _gloo.Handover("all_gather")
        with guarded("all_gather", self.progress):
            works = _gloo.all_gather(output, input, self.group, self.rank, self.world_size, handover)
        return self._handle(works, "all_gather", async_op, handover.settle)

    def broadcast(self, tensor: torch.Tensor, src_rank: int = 0) -> None:
        """Copy group rank `src_rank`'s tensor to every rank."""
        size = _nbytes(tensor)
        self._count("broadcast", size, size if self.rank == src_rank else 0)
        src = dist.get_global_rank(self.group, src_rank) if self.group is not None else src_rank
        if not self._gloo_thread:
            with guarded("broadcast", self.progress):
                dist.broadcast(tensor, src=src, group=self.group)
            return
        handover = _gloo.Handover("broadcast")
        with guarded("broadcast", self.progress):
            works = [dist.broadcast(handover(tensor), src=src, group=self.group, async_op=True)]
        self._handle(works, "broadcast", False, handover.settle)

    def _handle(self, works: list[dist.Work], op: str, async_op: bool,
                then: Callable[[], None] | None = None) -> Work | None:
        """`works` is the list the call launched: waiting empties it, so that no frame keeps gloo's objects."""
        handle = Work(works, op, self.progress, then)
        if async_op:
            return handle
        handle.wait()
        return None

    def _count(self, op: str, payload: int, sent: int) -> None:
        self.ledger.count_comm(op, payload, sent)


def _launched(work: dist.Work | None) -> list[dist.Work]:
    return [] if work is None else [work]  # None: torch waited for it already (async_op=False)


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
