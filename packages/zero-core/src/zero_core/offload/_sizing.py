"""What an offload device will hold for this rank, asked before anything is allocated.

The engine describes each block's copies (`OptimizerCopies`, `ParameterCopies`) from the placement
plan, which says which copy is in host memory, pinned or not, and which in swap files; the device
sizes them (`OffloadDevice.plan`) with what only it knows: whether its pin backend really pins, and
its swap space's alignment. Every figure is bytes for this rank.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from zero_plugins.placement import Copy, Extent, Location, PlacementPlan

from ._swap import SwapSettings


# Optimizers whose update of an element reads that element's grad and state alone (and scalars), so a master
# cut into any slices steps to the same values: NVMe offload may then swap it in slices smaller than a sub-group.
_ELEMENTWISE = frozenset({"adam", "adamw", "lion", "adagrad", "sgd"})


def steps_elementwise(name: str) -> bool:
    """Whether the config's optimizer type `name` steps element by element (Adafactor, for one, does not:
    its step size depends on the norm of the whole tensor)."""
    return name.lower() in _ELEMENTWISE


# The copies `offload_optimizer` places at its device (the step's fp32 gradients at stage 1, the partition's later).
_OPTIMIZER_COPIES = frozenset({Copy.MASTER, Copy.GRAD_PARTITION, Copy.STEP_GRAD, Copy.OPTIMIZER_STATE})


@dataclass(frozen=True, kw_only=True)
class OptimizerCopies:
    """`offload_optimizer`'s copies, as the placement plan places them at its device: per element of this rank's
    partition, the bytes in host memory (of which pinned) and in swap files, and whether swap buffers stream them."""

    elements: int  # this rank's partition of the trainable parameters
    host_per_element: int  # the plan's copies in host memory at this device (master, gradients, state)
    pinned_per_element: int  # the part of them the plan pins (the gradients the device's reductions land in)
    disk_per_element: int  # the plan's copies in swap files (the master and the state, at an NVMe device)
    swap: SwapSettings
    swap_buffers: bool  # the plan streams the swap files through `swap`'s pool

    @classmethod
    def from_plan(cls, plan: PlacementPlan, *, elements: int, swap: SwapSettings) -> OptimizerCopies:
        # (the parameters' copies may be at a device of the same name: only the optimizer's own count here)
        per_element = [placed for placed in plan if placed.copy in _OPTIMIZER_COPIES and placed.offload_device
                       and placed.extent in (Extent.PARTITION, Extent.WHOLE)]

        def bytes_at(*locations: Location) -> int:
            return sum(placed.element_bytes for placed in per_element if placed.location in locations)

        return cls(elements=elements, host_per_element=bytes_at(Location.HOST, Location.HOST_PINNED),
                   pinned_per_element=bytes_at(Location.HOST_PINNED), disk_per_element=bytes_at(Location.NVME),
                   swap=swap, swap_buffers=plan.has(Copy.SWAP_BUFFERS))

    def sized(self, *, pin: bool, alignment: int) -> OffloadPlan:
        """`pin`: whether this device really pins what the plan pins (its pin_memory, and a pin backend that locks)."""
        host = self.host_per_element * self.elements
        pinned = self.pinned_per_element * self.elements if pin else 0
        if self.swap_buffers:
            pool = self.swap.allocated_bytes(alignment, pinned=pin)
            host, pinned = host + pool, pinned + (pool if pin else 0)
        return OffloadPlan(host, pinned, disk_bytes=self.disk_per_element * self.elements)


@dataclass(frozen=True, kw_only=True)
class ParameterCopies:
    """`offload_param`'s copies: stage 3's 16-bit partitions, in host memory or (the plan's NVMe location) in swap
    files past the first `max_in_cpu` elements."""

    elements: int  # this rank's partition of the partitioned (non-persistent) parameters
    dtype: torch.dtype
    max_in_cpu: int  # with swap space, the elements kept in host memory before partitions go to swap
    swap: SwapSettings
    in_swap: bool  # the plan places the partition in swap files

    def sized(self, *, pin: bool, alignment: int) -> OffloadPlan:
        in_memory = min(self.max_in_cpu, self.elements) if self.in_swap else self.elements
        disk = (self.elements - in_memory) * self.dtype.itemsize
        host = in_memory * self.dtype.itemsize + (self.swap.allocated_bytes(alignment, pinned=pin) if disk else 0)
        return OffloadPlan(host, host if pin else 0, disk_bytes=disk)


@dataclass(frozen=True)
class OffloadPlan:
    """The memory an offload device will hold for this rank, computed before anything is allocated."""

    host_bytes: int  # every offloaded copy in host memory, pinned or not
    pinned_bytes: int  # the part of host_bytes that is pinned
    disk_bytes: int = 0  # copies in swap space (NVMe files)
