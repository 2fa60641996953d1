"""The `cpu` offload device: offloaded copies in host memory, pinned by the selected pin backend.

Copies to and from the accelerator run on a side stream where the accelerator has streams
(CUDA), from pinned memory, so they overlap compute; `synchronize()` joins them. On the
CPU accelerator the copies are plain tensor copies in one memory, and the same engine code
runs.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from zero_plugins import Category
from zero_core.accelerator import Accelerator
from zero_core.memory import Placement
from zero_core.offload import OffloadDevice, OffloadPlan, OffloadSettings

from ._capacity import check_host_memory, check_pinned_memory


class CpuOffloadDevice(OffloadDevice):
    placement = Placement.HOST

    def __init__(self, settings: OffloadSettings) -> None:
        super().__init__(settings)
        device = settings.accelerator.device(settings.accelerator.current_device())
        self._stream: torch.cuda.Stream | None = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._in_flight: list[torch.Tensor] = []  # sources of asynchronous copies, alive until synchronize()

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

    def to_host(self, host: torch.Tensor, source: torch.Tensor, *, accumulate: bool) -> None:
        on_host = source.device.type == "cpu"
        if accumulate:
            # The sum runs on the host, so the values must have arrived: a synchronous copy.
            host.add_(source if on_host else source.to("cpu"))
        elif self._stream is None or on_host:
            host.copy_(source)
        else:
            self._on_side_stream(source, lambda: host.copy_(source, non_blocking=True))

    def to_device(self, target: torch.Tensor, host: torch.Tensor) -> None:
        if self._stream is None or target.device.type == "cpu":
            target.copy_(host)
            return
        self._on_side_stream(host, lambda: target.copy_(host, non_blocking=True))

    def synchronize(self) -> None:
        if self._stream is not None:
            self._stream.synchronize()
            torch.cuda.current_stream(self._stream.device).wait_stream(self._stream)
        self._in_flight.clear()

    def optimizer_class(self, name: str) -> type[torch.optim.Optimizer] | None:
        from .optim import CPUAdagrad, CPUAdam, CPULion

        classes: dict[str, type[torch.optim.Optimizer]] = {
            "adam": CPUAdam, "adamw": CPUAdam, "adagrad": CPUAdagrad, "lion": CPULion,
        }
        return classes.get(name)

    def _on_side_stream(self, keep: torch.Tensor, copy: Callable[[], object]) -> None:
        assert self._stream is not None
        # The side stream must see what the compute stream wrote before it copies.
        self._stream.wait_stream(torch.cuda.current_stream(self._stream.device))
        with torch.cuda.stream(self._stream):
            copy()
        self._in_flight.append(keep)


def backend_pins(accelerator: Accelerator) -> bool:
    """Whether the selected pin backend really locks memory here (torch's is a no-op without an accelerator)."""
    probe = accelerator.empty_pinned(1, torch.float32)
    return accelerator.is_pinned(probe)
