"""The `torch` backend (the default): Tensor.pin_memory(), which registers the memory for
accelerator DMA. Without an accelerator torch cannot pin, so, as DeepSpeed documents, it is a
no-op there: the tensor comes back as it is and nothing is accounted. make_copy and
match_shape are ignored on this path, as in DeepSpeed.
"""
from __future__ import annotations

import torch

from ._accounting import track_pinned_storage
from ._backend import PinBackend
from ._errors import PinError
from ._tensors import check_pinnable, host_extent


def _accelerator() -> torch.device | None:
    return torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None


class TorchBackend(PinBackend):
    @classmethod
    def available(cls) -> tuple[bool, str]:
        device = _accelerator()
        if device is None:
            return True, "no accelerator: pin_memory is a no-op that returns the tensor as it is"
        return True, f"Tensor.pin_memory() for {device.type}"

    def pin_memory(self, tensor: torch.Tensor, make_copy: bool = True, match_shape: bool = True) -> torch.Tensor:
        check_pinnable(tensor)  # torch always copies; and the same input fails with or without an accelerator
        if tensor.device.type != "cpu":
            raise PinError(f"the torch pin backend pins CPU tensors; this one is on {tensor.device}: "
                           "move it with .cpu() first, or pin with DS_PIN_MEMORY_BACKEND=native")
        if _accelerator() is None or tensor.is_pinned():
            return tensor
        pinned = tensor.pin_memory()
        track_pinned_storage(self.name, pinned)
        return pinned

    def empty(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        if _accelerator() is None:
            return torch.empty(numel, dtype=dtype)
        # From torch's pinned host allocator directly: no pageable temporary, no copy (it caches freed blocks too).
        pinned = torch.empty(numel, dtype=dtype, pin_memory=True)
        track_pinned_storage(self.name, pinned)
        return pinned

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        return host_extent(tensor) is not None and tensor.is_pinned()

    def unpin_memory(self, tensor: torch.Tensor) -> bool:
        # torch frees (or caches) pinned memory when the storage dies; nothing to release early.
        return False
