"""The `cpu` offload device: offloaded copies in host memory, pinned by the selected pin backend.

Copies to and from the accelerator go through the accelerator's copy stream (on CUDA a side
stream, from and into pinned memory), so they overlap compute; each returns its transfer in
flight, which holds the tensors it reads until it is complete, and `synchronize()` (the
step's boundary) joins them all. On the CPU accelerator the copies are plain tensor copies
in one memory, complete at once, and the same engine code runs.
"""
from __future__ import annotations

import torch
from zero_plugins import Category
from zero_core.accelerator import Accelerator, Transfer
from zero_core.memory import Placement
from zero_core.offload import OffloadDevice, OffloadPlan, OffloadSettings

from ._capacity import check_host_memory, check_pinned_memory


class CpuOffloadDevice(OffloadDevice):
    placement = Placement.HOST

    def __init__(self, settings: OffloadSettings) -> None:
        super().__init__(settings)
        self._copies = settings.accelerator.copy_stream()

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, "host memory"

    def check_capacity(self, plan: OffloadPlan) -> None:
        check_host_memory(plan, self.settings)
        if self.settings.pin_memory and backend_pins(self.settings.accelerator):
            check_pinned_memory(plan, self.settings)

    def allocate(self, numel: int, dtype: torch.dtype, category: Category, *, pin: bool) -> torch.Tensor:
        pin = pin and self.settings.pin_memory
        accelerator = self.settings.accelerator  # pins with the selected pin backend (a dry run's: modelled)
        # Born pinned: no pageable temporary, and nothing pinned again in later steps.
        tensor = accelerator.empty_pinned(numel, dtype) if pin else torch.empty(numel, dtype=dtype)
        tensor.zero_()
        pinned = pin and accelerator.is_pinned(tensor)
        return self.settings.ledger.register(tensor, category, Placement.HOST, pinned)

    def to_host(self, host: torch.Tensor, source: torch.Tensor, *, accumulate: bool) -> Transfer:
        def copy() -> None:
            if not accumulate:
                host.copy_(source, non_blocking=True)
            elif source.device == host.device:
                host.add_(source)
            else:
                # The sum runs on the device, in the copy stream's order: the host never waits for the values.
                host.copy_(host.to(source.device, non_blocking=True).add_(source), non_blocking=True)

        return self._copies.issue(copy, keep=(source, host))

    def to_device(self, target: torch.Tensor, host: torch.Tensor) -> Transfer:
        return self._copies.issue(lambda: target.copy_(host, non_blocking=True), keep=(host,))

    def synchronize(self) -> None:
        self._copies.synchronize()

    def optimizer_class(self, name: str) -> type[torch.optim.Optimizer] | None:
        from .optim import CPUAdagrad, CPUAdam, CPULion

        classes: dict[str, type[torch.optim.Optimizer]] = {
            "adam": CPUAdam, "adamw": CPUAdam, "adagrad": CPUAdagrad, "lion": CPULion,
        }
        return classes.get(name)


def backend_pins(accelerator: Accelerator) -> bool:
    """Whether the selected pin backend really locks memory here (torch's is a no-op without an accelerator)."""
    probe = accelerator.empty_pinned(1, torch.float32)
    return accelerator.is_pinned(probe)
