"""Where one kind of copy lives: on the device, or in host memory at an offload device.

A `Home` allocates the copies of its kind and moves data in and out of them. The builders
pick each copy's home once (see _homes.py); the unit, the master, the gradient buckets and
the optimizer only ask their homes, so none of them branches on where a copy lives.
Copies in swap space are not tensors and have their own types (SwappedMaster, stage 3's
SwappedShard); their staging buffers are host memory at the device's `HostHome`.

Every copy returns its transfer in flight (zero_core.accelerator.Transfer), which only the
consumer waits for: copies between the device and host memory overlap compute, and the
home's `synchronize()` is for the step's boundary, never for a unit's gather or a bucket.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from zero_plugins import Category

from ..accelerator import COMPLETED, Transfer
from ..memory import MemoryLedger, Placement
from ..offload import OffloadDevice


class Home(ABC):
    placement: Placement

    @property
    @abstractmethod
    def keeps_buffers(self) -> bool:
        """Whether buffers here are kept and zeroed rather than freed and allocated again (pinned memory is
        costly to allocate)."""

    @abstractmethod
    def allocate(self, numel: int, dtype: torch.dtype, category: Category) -> torch.Tensor:
        """A zeroed 1-D tensor here, counted in the ledger under `category`."""

    @abstractmethod
    def copy_in(self, stored: torch.Tensor, source: torch.Tensor, *, accumulate: bool = False) -> Transfer:
        """`stored` (here) = (or += with `accumulate`) `source` (anywhere), cast to stored's dtype."""

    @abstractmethod
    def copy_out(self, target: torch.Tensor, stored: torch.Tensor) -> Transfer:
        """`target` (on the device) = `stored` (here), cast to target's dtype."""

    @abstractmethod
    def on_device(self, stored: torch.Tensor, place: torch.Tensor) -> tuple[torch.Tensor, Transfer]:
        """`stored`'s values as a tensor on the device: `stored` itself, or copied into `place` (on the device),
        with the copy in flight."""

    @abstractmethod
    def copy_from(self, target: torch.Tensor, source: torch.Tensor, source_home: Home) -> Transfer:
        """`target` (here) = `source` (at `source_home`): the end that is not the device drives the copy,
        so its offload device can overlap it with compute."""

    def synchronize(self) -> None:  # noqa: B027 - a home whose copies are synchronous has nothing to wait for
        """Block until every copy to or from this home issued so far is complete."""


class DeviceHome(Home):
    placement = Placement.DEVICE

    def __init__(self, device: torch.device, ledger: MemoryLedger) -> None:
        self.device = device
        self.ledger = ledger

    @property
    def keeps_buffers(self) -> bool:
        return False

    def allocate(self, numel: int, dtype: torch.dtype, category: Category) -> torch.Tensor:
        return self.ledger.new(category, lambda: torch.zeros(numel, dtype=dtype, device=self.device))

    # Copies on the device run in the current stream's order: complete for whatever is issued after them.
    def copy_in(self, stored: torch.Tensor, source: torch.Tensor, *, accumulate: bool = False) -> Transfer:
        if accumulate:
            stored.add_(source)
        else:
            stored.copy_(source)
        return COMPLETED

    def copy_out(self, target: torch.Tensor, stored: torch.Tensor) -> Transfer:
        target.copy_(stored)
        return COMPLETED

    def on_device(self, stored: torch.Tensor, place: torch.Tensor) -> tuple[torch.Tensor, Transfer]:
        return stored, COMPLETED

    def copy_from(self, target: torch.Tensor, source: torch.Tensor, source_home: Home) -> Transfer:
        return source_home.copy_out(target, source)


class HostHome(Home):
    """Host memory at an offload device; `transfers`: the copies here are ends of device transfers, so
    they are pinned when the block's `pin_memory` allows (copies only the CPU step touches never are)."""

    def __init__(self, offload: OffloadDevice, *, transfers: bool) -> None:
        self.offload = offload
        self.placement = offload.placement
        self._transfers = transfers

    @property
    def keeps_buffers(self) -> bool:
        return True

    def allocate(self, numel: int, dtype: torch.dtype, category: Category) -> torch.Tensor:
        return self.offload.allocate(numel, dtype, category, pin=self._transfers)

    def copy_in(self, stored: torch.Tensor, source: torch.Tensor, *, accumulate: bool = False) -> Transfer:
        return self.offload.transfer_to_host(stored, source, accumulate=accumulate)

    def copy_out(self, target: torch.Tensor, stored: torch.Tensor) -> Transfer:
        return self.offload.transfer_to_device(target, stored)

    def on_device(self, stored: torch.Tensor, place: torch.Tensor) -> tuple[torch.Tensor, Transfer]:
        return place, self.copy_out(place, stored)

    def copy_from(self, target: torch.Tensor, source: torch.Tensor, source_home: Home) -> Transfer:
        return self.copy_in(target, source)

    def synchronize(self) -> None:
        self.offload.synchronize()
