"""gloo's collectives, run so that their memory is allocated and freed at points of the rank's own thread.

ProcessGroupGloo runs each collective on a worker thread, in a work object that holds the collective's tensors,
and the thread drops that object only after it has reported the collective complete. Its reduce-scatter
all-reduces a copy of the input that the object holds; its all-gather receives into a flat copy of the output
that the thread allocates when the collective starts and frees when it ends. So the copies, and any tensor the
engine let go of right after a collective, were freed (the all-gather's copy also allocated) at moments that
depended on thread scheduling, and the same job's allocator peak moved from run to run (docs/ledger.md, "The
same bytes every run"). Here:

- every tensor goes to gloo as a view of its own (`Handover`), whose use count says when gloo has let go of it,
  and waiting for a collective waits for that too (microseconds after it completed);
- an all-gather is one in-place broadcast per rank, each rank's chunk of the output from that rank: nothing is
  copied, and each rank sends its chunk to the N-1 others, as many bytes as a ring all-gather;
- a reduce-scatter all-reduces a copy of its input that this rank makes and the ledger counts (`comm.staging`),
  then copies this rank's chunk out: the bytes of gloo's own copy, allocated at the launch and freed at the wait.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from zero_plugins import Category, ZeroError

from ..memory import MemoryLedger

# gloo's thread drops a finished collective's work object within microseconds; far longer means it never will.
RELEASE_TIMEOUT = 10.0


class GlooStillHolds(ZeroError, RuntimeError):
    """gloo kept a completed collective's tensors: their memory would be freed at a moment nobody knows."""


class Handover:
    """The tensors one collective hands to gloo, each as a view only this object and gloo refer to.

    `waits=False` for a dry run's fake group, which has no thread to wait for: the tensors go as they are.
    """

    def __init__(self, op: str, *, waits: bool = True) -> None:
        self._op = op
        self._waits = waits
        self._views: list[torch.Tensor] = []
        self._ours: list[int] = []  # each view's Python refcount while only `_views` holds it

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        if not self._waits:
            return tensor
        self._views.append(tensor.detach())  # a tensor of its own on the same storage: gloo's references show
        self._ours.append(sys.getrefcount(self._views[-1]))
        return self._views[-1]

    def settle(self) -> None:
        """Return once gloo holds none of the views (call it after the collective completed)."""
        deadline = time.monotonic() + RELEASE_TIMEOUT
        pause = 0.0
        while not all(self._let_go(index) for index in range(len(self._views))):
            if time.monotonic() > deadline:
                raise GlooStillHolds(
                    f"gloo still held the tensors of a completed {self._op} {RELEASE_TIMEOUT:.0f} s after it "
                    f"completed (torch {torch.__version__}); zero waits for gloo's worker thread to let go of them "
                    "so that their memory is freed at the same point every run. This torch keeps them longer: "
                    "please report it with the torch version")
            time.sleep(pause)  # releases the GIL, which gloo's thread needs for its last step
            pause = min(2 * pause or 1e-6, 1e-3)
        self._views.clear()
        self._ours.clear()

    def _let_go(self, index: int) -> bool:
        # gloo lets go in two steps: its thread drops the C++ references (the use count), then, once it holds the
        # GIL, the reference to the Python tensor that torch keeps while C++ shares it (the refcount). Until then
        # dropping our view would leave the memory to be freed on gloo's thread.
        return _holders(self._views[index]) == 1 and sys.getrefcount(self._views[index]) <= self._ours[index]


def all_gather(output: torch.Tensor, input: torch.Tensor, group: dist.ProcessGroup | None, rank: int,
               world_size: int, handover: Handover) -> list[dist.Work]:
    """Launch the broadcasts that fill `output` (N equal chunks) with every rank's `input`."""
    if output.numel() != world_size * input.numel():
        raise ValueError(f"all_gather: the output has {output.numel()} elements, not {world_size} x the input's "
                         f"{input.numel()}")
    chunks = output.view(world_size, -1)
    mine = chunks[rank]
    if mine.data_ptr() != input.data_ptr():
        mine.copy_(input.reshape(-1))
    return [dist.broadcast(handover(chunks[source]), src=_global(group, source), group=group, async_op=True)
            for source in range(world_size)]


def reduce_scatter(output: torch.Tensor, input: torch.Tensor, group: dist.ProcessGroup | None, rank: int,
                   world_size: int, ledger: MemoryLedger, handover: Handover
                   ) -> tuple[list[dist.Work], Callable[[], None]]:
    """Launch the all-reduce of a copy of `input`; the second value, called once it completed, copies this rank's
    chunk of the sum into `output` (and holds the copy until it is dropped)."""
    copy = ledger.new(Category.COMM_STAGING, input.clone)
    works = [dist.all_reduce(handover(copy), group=group, async_op=True)]

    def take_chunk() -> None:
        output.copy_(copy.view(world_size, -1)[rank].view_as(output))

    return works, take_chunk


def _holders(view: torch.Tensor) -> int:
    # Tensor._use_count (not in torch's stubs): references to this tensor object's C++ half, ours included.
    count: int = view._use_count()  # type: ignore[attr-defined]
    return count


def _global(group: dist.ProcessGroup | None, rank: int) -> int:
    return dist.get_global_rank(group, rank) if group is not None else rank
