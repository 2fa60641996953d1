"""The collectives the engine uses, each counted in the ledger's `comm` figures.

Bytes sent per rank are counted as the ring algorithm sends them, whatever algorithm the
backend picks (docs/engine.md, "Communication"): for N ranks and a payload of B bytes,
all-reduce sends 2(N-1)/N * B, reduce-scatter (B = its input) and all-gather (B = its
output) send (N-1)/N * B, and a broadcast sends B from the source only.
"""
from __future__ import annotations

from typing import Literal, overload

import torch
import torch.distributed as dist
from zero_plugins import Category

from ..accelerator import get_accelerator
from ..memory import MemoryLedger, Placement
from ._failure import guarded
from ._process_group import is_fake_group
from ._progress import RankProgress

# torch 2.13 renamed the single-tensor collectives; older releases only have the old names.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor



class Work:
    """An asynchronous collective's handle: `wait()` raises CollectiveFailed (naming the collective, where in
    training it was launched and the peers it waited on) instead of the backend's bare error. A backend's
    staging copy (`staging`, counted in the ledger) is released once the collective has completed."""

    def __init__(self, work: dist.Work, op: str, progress: RankProgress, staging: _Staging | None = None) -> None:
        self._work, self._op, self._progress, self._staging = work, op, progress, staging

    def wait(self) -> None:
        with guarded(self._op, self._progress):
            self._work.wait()
        if self._staging is not None:
            self._staging.release()


class _Staging:
    """gloo's copy of a collective's whole buffer, counted as `comm.staging` while the collective runs.

    gloo's all-gather receives into a flat copy of its output and its reduce-scatter reduces a copy of its
    input (measured with the CPU allocator's count: 1x the output, 1x the input, whatever the world size);
    all-reduce and broadcast work in place. NCCL stages nothing, so nothing is counted there.
    """

    def __init__(self, ledger: MemoryLedger, nbytes: int, device: torch.device, *, modelled: bool) -> None:
        self._ledger = ledger
        ledger.register_extent(self, Category.COMM_STAGING, Placement.DEVICE, nbytes, device=device.type,
                               allocated=True)
        if modelled:
            # A dry run's fake group stages nothing. gloo's thread starts a collective as it is launched and
            # holds the copy while it runs, which training overlaps; a fake copy made and dropped at once stands
            # for it (docs/profile.md, "Dry runs": measured within 2% of gloo's on the calibration grid).
            torch.empty(nbytes, dtype=torch.uint8, device=device)

    def release(self) -> None:
        self._ledger.release_extent(self)


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
        self._modelled = is_fake_group(group)  # a dry run: the backend is the one its accelerator stands for
        backend = get_accelerator().communication_backend_name() if self._modelled else str(dist.get_backend(group))
        self._gloo = backend == "gloo"  # stages all-gathers and reduce-scatters (_Staging)

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
        with guarded("all_reduce", self.progress):
            work = dist.all_reduce(tensor, op=op, group=self.group, async_op=async_op)
        return self._handle(work, "all_reduce")

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
        staging = self._staging(input)
        with guarded("reduce_scatter", self.progress):
            work = _reduce_scatter_single(output, input, group=self.group, async_op=async_op)
        return self._handle(work, "reduce_scatter", staging)

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
        staging = self._staging(output)
        with guarded("all_gather", self.progress):
            work = _all_gather_single(output, input, group=self.group, async_op=async_op)
        return self._handle(work, "all_gather", staging)

    def broadcast(self, tensor: torch.Tensor, src_rank: int = 0) -> None:
        """Copy group rank `src_rank`'s tensor to every rank."""
        size = _nbytes(tensor)
        self._count("broadcast", size, size if self.rank == src_rank else 0)
        src = dist.get_global_rank(self.group, src_rank) if self.group is not None else src_rank
        with guarded("broadcast", self.progress):
            dist.broadcast(tensor, src=src, group=self.group)

    def _handle(self, work: dist.Work | None, op: str, staging: _Staging | None = None) -> Work | None:
        if work is None:  # completed: its staging is gone
            if staging is not None:
                staging.release()
            return None
        return Work(work, op, self.progress, staging)

    def _staging(self, buffer: torch.Tensor) -> _Staging | None:
        return _Staging(self.ledger, _nbytes(buffer), buffer.device, modelled=self._modelled) if self._gloo else None

    def _count(self, op: str, payload: int, sent: int) -> None:
        self.ledger.count_comm(op, payload, sent)


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
