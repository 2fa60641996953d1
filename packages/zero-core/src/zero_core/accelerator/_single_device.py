"""What an accelerator with one synchronous device answers (the CPU, a dry run's fake device)."""
from __future__ import annotations

import torch

from .abstract import Accelerator


class SingleDeviceAccelerator(Accelerator):
    """One device, index 0, whose work is done when the call returns; torch's one generator; every dtype."""

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return 0

    def set_device(self, device_index: int) -> None:
        if device_index != 0:
            raise ValueError(f"the {self.name} accelerator has one device, index 0 (got {device_index})")

    def synchronize(self, device_index: int | None = None) -> None:
        """Nothing runs after the call that started it, so there is nothing to wait for."""

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def is_bf16_supported(self) -> bool:
        return True

    def is_fp16_supported(self) -> bool:
        return True
