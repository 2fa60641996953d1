"""`dry_run(...)`: one process stands for one rank of a job of any size, on fake tensors.

Inside it, torch.distributed is joined through torch's fake process group (every collective completes at once
and moves no data), FakeTensorMode makes every tensor created a fake one, the fake allocator counts their
storages, the accelerator is the dry run's, for the target device, and torch's optimizers take the kernels they
would take there (_optimizer_kernels.py). The engine's code runs unchanged.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from zero_plugins import ZeroError

from ..accelerator import using_accelerator
from ..memory import count_fake_tensors
from ._accelerator import DryRunAccelerator
from ._allocator import FakeAllocator
from ._attention import register_cuda_attention
from ._optimizer_kernels import target_optimizer_kernels
from ._rng_module import register_rng_module


@dataclass(frozen=True)
class DryRun:
    """What a dry run's code can ask: the rank it stands for, and its accelerator and allocator."""

    rank: int
    world_size: int
    accelerator: DryRunAccelerator
    allocator: FakeAllocator


@contextmanager
def dry_run(*, rank: int, world_size: int, device: str, total_memory: int) -> Iterator[DryRun]:
    """Run the block as rank `rank` of `world_size` on fake `device` tensors (`total_memory`: the device's size)."""
    if dist.is_initialized():
        raise ZeroError("a dry run joins its own fake process group, but this process has already joined one; "
                        "run the dry run in a process of its own (zero profile --dry-run does)")
    if not 0 <= rank < world_size:
        raise ZeroError(f"a dry run's rank must be in 0..{world_size - 1} (got {rank})")
    # torch's fake backend registers itself on import ("fake"); its FakeStore needs no rendezvous.
    from torch.testing._internal.distributed.fake_pg import FakeStore

    allocator = FakeAllocator()
    accelerator = DryRunAccelerator(device, allocator, total_memory)  # first: it refuses an unknown device
    register_rng_module()
    if device == "cuda":
        register_cuda_attention()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    count_fake_tensors(True)
    try:
        with using_accelerator(accelerator, "zero_core.dryrun.dry_run"), target_optimizer_kernels(accelerator.traced), \
                FakeTensorMode(allow_non_fake_inputs=True), allocator:
            yield DryRun(rank, world_size, accelerator, allocator)
    finally:
        count_fake_tensors(False)
        dist.destroy_process_group()
