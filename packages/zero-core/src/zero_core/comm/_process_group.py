"""Joining torch.distributed the way DeepSpeed does: from torchrun's environment, or alone.

The collectives' timeout is `init_distributed(timeout=...)`'s, else `ZERO_COLLECTIVE_TIMEOUT` (seconds),
else torch's default (30 minutes): a stalled peer ends in CollectiveFailed after that long, not a hang.
"""
from __future__ import annotations

import os
from datetime import timedelta

import torch.distributed as dist
from zero_plugins import ZeroError, env_int

from ..accelerator import Accelerator, get_accelerator
from ._timeout import collective_timeout

_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def ensure_process_group(accelerator: Accelerator, dist_init_required: bool | None = None) -> None:
    """Initialise the default process group with the accelerator's backend unless it already is.

    Under torchrun (RANK and WORLD_SIZE set) it joins through the environment; a process
    started without a launcher becomes a world of one, which needs no rendezvous.
    """
    if dist.is_initialized():
        return
    if dist_init_required is False:
        raise ZeroError("torch.distributed is not initialised and dist_init_required=False; call "
                        "torch.distributed.init_process_group first, or leave dist_init_required unset")
    _join(accelerator, accelerator.communication_backend_name(), collective_timeout(), None, -1, -1)


def init_distributed(dist_backend: str | None = None, auto_mpi_discovery: bool = True, distributed_port: int = 29500,
                     verbose: bool = True, timeout: timedelta | None = None, init_method: str | None = None,
                     dist_init_required: bool | None = None, config: object = None, rank: int = -1,
                     world_size: int = -1) -> None:
    """DeepSpeed's `deepspeed.init_distributed`, with its arguments: join the default process group.

    `dist_backend` defaults to the accelerator's (gloo on CPU, NCCL on CUDA); `timeout` to
    `ZERO_COLLECTIVE_TIMEOUT` seconds, else torch's 30 minutes. `rank`/`world_size` (-1: from the
    environment) and `init_method` are torch's. Without a launcher's environment the process trains
    alone. `auto_mpi_discovery`, `distributed_port`, `verbose` and `config` are accepted and unused:
    zero reads no MPI environment (launch with torchrun).
    """
    if dist.is_initialized():
        return
    if dist_init_required is False:
        return
    accelerator = get_accelerator()
    backend = dist_backend or accelerator.communication_backend_name()
    _join(accelerator, backend, timeout if timeout is not None else collective_timeout(), init_method, rank,
          world_size)


def _join(accelerator: Accelerator, backend: str, timeout: timedelta | None, init_method: str | None, rank: int,
          world_size: int) -> None:
    # timeout None: torch's default.
    if init_method is not None or rank >= 0 or world_size >= 0:
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                                timeout=timeout)
    elif "RANK" in os.environ or "WORLD_SIZE" in os.environ:
        missing = [name for name in _LAUNCHER_VARS if name not in os.environ]
        if missing:
            raise ZeroError(f"the launcher environment is incomplete: {', '.join(missing)} not set; "
                            "launch with torchrun, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
        # torch reads these too, and says only "invalid literal for int()" of a bad one
        world = env_int("WORLD_SIZE", 1, minimum=1)
        if env_int("RANK", 0, minimum=0) >= world:
            raise ZeroError(f"RANK={os.environ['RANK']} is not below WORLD_SIZE={world}: ranks count from 0; "
                            "launch with torchrun, which sets both")
        env_int("MASTER_PORT", 0, minimum=1)
        local_rank = env_int("LOCAL_RANK", 0, minimum=0)
        if accelerator.device_count() > 1:
            accelerator.set_device(local_rank)
        dist.init_process_group(backend, timeout=timeout)
    else:
        # torch.distributed imports HashStore from torch._C without re-exporting it (no `as`, no __all__).
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,  # type: ignore[attr-defined]
                                timeout=timeout)


def is_fake_group(group: dist.ProcessGroup | None = None) -> bool:
    """Whether the group is torch's fake one: a dry run (zero_core.dryrun), one process standing for every rank,
    whose collectives move no data."""
    return str(dist.get_backend(group)) == "fake"
