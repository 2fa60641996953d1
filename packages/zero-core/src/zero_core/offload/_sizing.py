"""What an offload device will hold for this rank, asked before anything is allocated.

The engine describes each block's copies (`OptimizerCopies`, `ParameterCopies`) and the
device sizes them (`OffloadDevice.plan`): a device that keeps everything in host memory takes
`in_memory`, one with swap space `swapped`. Every figure is bytes for this rank.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ._swap import SwapSettings

_FP32 = 4


# Optimizers whose update of an element reads that element's grad and state alone (and scalars), so a master
# cut into any slices steps to the same values: NVMe offload may then swap it in slices smaller than a sub-group.
_ELEMENTWISE = frozenset({"adam", "adamw", "lion", "adagrad", "sgd"})


def steps_elementwise(name: str) -> bool:
    """Whether the config's optimizer type `name` steps element by element (Adafactor, for one, does not:
    its step size depends on the norm of the whole tensor)."""
    return name.lower() in _ELEMENTWISE


@dataclass(frozen=True, kw_only=True)
class OptimizerCopies:
    """`offload_optimizer`'s copies: the fp32 master, gradients and optimizer state of this rank's partition."""

    elements: int  # this rank's partition of the trainable parameters
    state_tensors: int  # fp32 state tensors per element (optimizer_state_tensors)
    swap: SwapSettings

    def in_memory(self, *, pin: bool) -> OffloadPlan:
        # The gradients are the pinned part: reduced gradients are copied into them during backward.
        grads = _FP32 * self.elements
        host = (_FP32 + _FP32 + _FP32 * self.state_tensors) * self.elements
        return OffloadPlan(host, grads if pin else 0)

    def swapped(self, *, pin: bool, alignment: int) -> OffloadPlan:
        # The master and the state go to swap space; the gradients and the pool's buffers stay in host memory.
        host = _FP32 * self.elements + self.swap.allocated_bytes(alignment, pinned=pin)
        disk = _FP32 * (1 + self.state_tensors) * self.elements
        return OffloadPlan(host, host if pin else 0, disk_bytes=disk)


@dataclass(frozen=True, kw_only=True)
class ParameterCopies:
    """`offload_param`'s copies: stage 3's 16-bit partitions."""

    elements: int  # this rank's partition of the partitioned (non-persistent) parameters
    dtype: torch.dtype
    max_in_cpu: int  # with swap space, the elements kept in host memory before partitions go to swap
    swap: SwapSettings

    def in_memory(self, *, pin: bool) -> OffloadPlan:
        nbytes = self.elements * self.dtype.itemsize
        return OffloadPlan(nbytes, nbytes if pin else 0)

    def swapped(self, *, pin: bool, alignment: int) -> OffloadPlan:
        in_memory = min(self.max_in_cpu, self.elements) * self.dtype.itemsize
        disk = self.elements * self.dtype.itemsize - in_memory
        host = in_memory + (self.swap.allocated_bytes(alignment, pinned=pin) if disk else 0)
        return OffloadPlan(host, host if pin else 0, disk_bytes=disk)


@dataclass(frozen=True)
class OffloadPlan:
    """The memory an offload device will hold for this rank, computed before anything is allocated."""

    host_bytes: int  # every offloaded copy in host memory, pinned or not
    pinned_bytes: int  # the part of host_bytes that is pinned
    disk_bytes: int = 0  # copies in swap space (NVMe files)
