"""Where a copy of the training state lives, as the ledger and the stage policies name it."""
from __future__ import annotations

import enum


class Placement(enum.Enum):
    DEVICE = "device"  # the accelerator's memory (on the CPU accelerator, the same RAM as the host)
    HOST = "host"  # host memory, pinned or not
    NVME = "nvme"  # swap files on disk


def location(placement: Placement, device_type: str, pinned: bool) -> str:
    """The ledger's key for memory at `placement`: the device type ("cpu", "cuda"), "host", "host.pinned" or "nvme".

    Host memory is its own key even on the CPU accelerator, where it is the same RAM, so that a
    report shows what offload moved off the device.
    """
    if placement is Placement.DEVICE:
        return device_type
    if placement is Placement.HOST:
        return "host.pinned" if pinned else "host"
    return "nvme"
