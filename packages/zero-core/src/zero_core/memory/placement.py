"""Where a copy of the training state lives, as the ledger and the stage policies name it.

The location names are the placement plan's (`zero_plugins.placement.Location`), defined there once:
the ledger, the plan and the estimator all write "host", "host.pinned" and "nvme" from it.
"""
from __future__ import annotations

import enum

from zero_plugins.placement import Location


class Placement(enum.Enum):
    """Where a home keeps its copies; host memory is one place whether pinned or not (`location` tells them apart)."""

    DEVICE = Location.DEVICE.value  # the accelerator's memory (on the CPU accelerator, the same RAM as the host)
    HOST = Location.HOST.value  # host memory, pinned or not
    NVME = Location.NVME.value  # swap files on disk


def location(placement: Placement, device_type: str, pinned: bool) -> str:
    """The ledger's key for memory at `placement`: the device type ("cpu", "cuda"), or the plan's location name.

    Host memory is its own key even on the CPU accelerator, where it is the same RAM, so that a
    report shows what offload moved off the device.
    """
    if placement is Placement.DEVICE:
        return device_type
    if placement is Placement.HOST:
        return str(Location.HOST_PINNED if pinned else Location.HOST)
    return str(Location.NVME)
