"""`deepspeed.comm`'s common calls, with its signatures, for scripts that `import zero_core as deepspeed`.

They are torch.distributed's on the default group once it is joined (`init_distributed`, or `initialize`).
DeepSpeed's profiling arguments (`prof`, `log_name`, `debug`) are accepted and unused: zero's collectives are
counted in the engine's ledger, and these calls are the script's own.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from zero_plugins import ZeroError, env_int

ReduceOp = dist.ReduceOp


def is_initialized() -> bool:
    """Whether the default process group exists."""
    return dist.is_available() and dist.is_initialized()


def get_rank(group: Any = None) -> int:
    """This process's rank in `group` (the default group if None); -1 if it is not a member."""
    _check_initialized("get_rank")
    return dist.get_rank(group)


def get_world_size(group: Any = None) -> int:
    """The number of processes in `group` (the default group if None); -1 if this one is not a member."""
    _check_initialized("get_world_size")
    return dist.get_world_size(group)


def get_local_rank() -> int:
    """This process's rank on its node, from the launcher (LOCAL_RANK, or Open MPI's), 0 if none says."""
    _check_initialized("get_local_rank")
    return env_int("LOCAL_RANK", env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, minimum=0), minimum=0)


def barrier(group: Any = None, async_op: bool = False, device_ids: list[int] | None = None, prof: bool = False,
            log_name: str = "barrier", debug: str | None = None) -> Any:
    """Wait until every rank of `group` reaches it; a work handle with `async_op`."""
    _check_initialized("barrier")
    return dist.barrier(group=group, async_op=async_op, device_ids=device_ids)


def all_reduce(tensor: torch.Tensor, op: Any = ReduceOp.SUM, group: Any = None, async_op: bool = False,
               prof: bool = False, log_name: str = "all_reduce", debug: str | None = None) -> Any:
    """Reduce `tensor` across `group` in place with `op`; a work handle with `async_op`."""
    _check_initialized("all_reduce")
    return dist.all_reduce(tensor, op=op, group=group, async_op=async_op)


def _check_initialized(call: str) -> None:
    if not is_initialized():
        raise ZeroError(f"comm.{call}() before the process group exists; call zero_core.init_distributed() or "
                        "zero_core.initialize() first")
