"""Whether an offload plan fits this host: pinned bytes against RLIMIT_MEMLOCK, host bytes against free RAM.

Both are checked for every rank on the host (`local_world_size`), since the ranks of one
node share its memory and its locked-memory accounting is per process but its RAM is not.
"""
from __future__ import annotations

import psutil
import zero_pin
from zero_plugins.ds_config import ConfigError
from zero_core.offload import OffloadPlan, OffloadSettings

def available_host_memory() -> int:
    """Bytes of host RAM the kernel can still hand out without swapping."""
    return int(psutil.virtual_memory().available)


def check_host_memory(plan: OffloadPlan, settings: OffloadSettings) -> None:
    ranks = settings.local_world_size
    needed = plan.host_bytes * ranks
    available = available_host_memory()
    if needed > available:
        raise ConfigError(
            f"{settings.block_path}.device",
            f"offloading needs {zero_pin.format_bytes(plan.host_bytes)} of host memory per rank, {zero_pin.format_bytes(needed)} for the {ranks} "
            f"rank(s) on this host, but {zero_pin.format_bytes(available)} is available; use fewer ranks per node, offload to "
            "nvme, or free host memory",
        )


def check_pinned_memory(plan: OffloadPlan, settings: OffloadSettings) -> None:
    """Locked memory counts per process against RLIMIT_MEMLOCK (root's CAP_IPC_LOCK lifts it)."""
    if plan.pinned_bytes == 0:
        return
    try:
        zero_pin.check_memlock(plan.pinned_bytes)
    except zero_pin.MemlockLimitError as error:
        raise ConfigError(f"{settings.block_path}.pin_memory",
                          f"offloading pins {zero_pin.format_bytes(plan.pinned_bytes)} per rank, over the locked-memory limit: "
                          f"{error}") from None


