"""Whether the swap files fit on `nvme_path`, checked before the first write."""
from __future__ import annotations

import os
from pathlib import Path

import zero_pin
from zero_plugins.ds_config import ConfigError
from zero_core.offload import OffloadPlan, OffloadSettings

from ._run_dir import RUN_PREFIX, tree_bytes


def check_disk_space(plan: OffloadPlan, settings: OffloadSettings, root: Path) -> None:
    """The ranks on this host share `nvme_path`'s file system, so all of them must fit in its free space.

    Ranks check one after the other, and one that has checked may already be writing: what this
    run's directory holds is part of the need counted here, so it counts as free.
    """
    stats = os.statvfs(root)
    free = stats.f_bavail * stats.f_frsize
    written = tree_bytes(root / f"{RUN_PREFIX}{settings.run_id}") if settings.run_id else 0
    ranks = settings.local_world_size
    needed = plan.disk_bytes * ranks
    if needed > free + written:
        besides = f" besides the {zero_pin.format_bytes(written)} this run has written" if written else ""
        raise ConfigError(
            f"{settings.block_path}.nvme_path",
            f"swapping needs {zero_pin.format_bytes(plan.disk_bytes)} of disk per rank, {zero_pin.format_bytes(needed)} "
            f"for the {ranks} rank(s) on this host, but {root} has {zero_pin.format_bytes(free)} free{besides}; "
            "free space there, point nvme_path at a larger drive, or use fewer ranks per node")
