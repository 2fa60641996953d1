"""Joining torch.distributed the way DeepSpeed does: from torchrun's environment, or alone."""
from __future__ import annotations

import os

import torch.distributed as dist
from zero_plugins import ZeroError

from ..accelerator import Accelerator

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
    backend = accelerator.communication_backend_name()
    if "RANK" in os.environ or "WORLD_SIZE" in os.environ:
        missing = [name for name in _LAUNCHER_VARS if name not in os.environ]
        if missing:
            raise ZeroError(f"the launcher environment is incomplete: {', '.join(missing)} not set; "
                            "launch with torchrun, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
        if accelerator.device_count() > 1:
            accelerator.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)
    else:
        # torch.distributed imports HashStore from torch._C without re-exporting it (no `as`, no __all__).
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
