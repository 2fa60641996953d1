"""The dry run's accelerator: the target device (cuda or cpu) as the engine sees it, on fake tensors.

Tensors on it are fake, so there is nothing to wait for, no stream, no seed to set on a device. Its memory
figures are the fake allocator's. Pinning cannot be faked (it needs a real driver): a pinned copy is an
ordinary fake host tensor remembered as pinned, and the report marks pinned bytes as modelled.
"""
from __future__ import annotations

import weakref

import torch

from ..accelerator import SingleDeviceAccelerator
from ._allocator import TRACED_DEVICE, FakeAllocator, FakeAllocatorRuler

DEVICES = tuple(TRACED_DEVICE)


class DryRunAccelerator(SingleDeviceAccelerator):
    """Never auto-detected: `zero_core.dryrun.dry_run` sets it for the dry run's duration."""

    name = "dry-run"

    def __init__(self, device: str, allocator: FakeAllocator, total_memory: int) -> None:
        if device not in DEVICES:
            raise ValueError(f"a dry run targets one of {', '.join(DEVICES)} (got {device!r})")
        self.target, self._allocator, self._total = device, allocator, total_memory
        self.traced = TRACED_DEVICE[device]  # the device type of its fake tensors
        self._pinned: weakref.WeakValueDictionary[int, torch.UntypedStorage] = weakref.WeakValueDictionary()

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, "fake tensors under a fake process group (zero profile --dry-run)"

    def communication_backend_name(self) -> str:
        """The target's backend, whose way the collectives take (on gloo a reduce-scatter's copy of its input, which
        a dry run traces); the group itself is torch's fake one."""
        return "nccl" if self.target == "cuda" else "gloo"

    def device_name(self, device_index: int | None = None) -> str:
        # Fake tensors compare devices exactly, and torch gives an index to lazy tensors ("lazy:0") but not to
        # the CPU's: every name is the one torch gives.
        return "cpu" if self.traced == "cpu" else f"{self.traced}:0"

    def memory_allocated(self, device_index: int | None = None) -> int:
        return self._allocator.current_bytes(self.traced)

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        return self._allocator.peak_bytes(self.traced)

    # No cache is modelled: what is reserved is what is allocated.
    def memory_reserved(self, device_index: int | None = None) -> int:
        return self.memory_allocated(device_index)

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        return self.max_memory_allocated(device_index)

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        self._allocator.reset_peak()

    def total_memory(self, device_index: int | None = None) -> int:
        return self._total

    def available_memory(self, device_index: int | None = None) -> int:
        return self._total - self.memory_allocated(device_index)

    def memory_stats_source(self) -> str:
        return self.allocator_ruler().name

    def allocator_ruler(self) -> FakeAllocatorRuler:
        return FakeAllocatorRuler(self._allocator, self.traced)

    # --- pinning, modelled ---
    def pin_memory(self, tensor: torch.Tensor, make_copy: bool = True, match_shape: bool = True) -> torch.Tensor:
        return self._remember(torch.empty_like(tensor, device="cpu").copy_(tensor) if make_copy else tensor)

    def empty_pinned(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        return self._remember(torch.empty(numel, dtype=dtype, device="cpu"))

    def _remember(self, pinned: torch.Tensor) -> torch.Tensor:
        if self.target == "cpu":
            return pinned  # as torch's pin backend without an accelerator: nothing to pin for
        storage = pinned.untyped_storage()
        self._pinned[storage._cdata] = storage  # forgotten when the storage dies
        return pinned

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        storage = tensor.untyped_storage()
        return self._pinned.get(storage._cdata) is storage

    def unpin_memory(self, tensor: torch.Tensor) -> bool:
        return self._pinned.pop(tensor.untyped_storage()._cdata, None) is not None

    def pinned_bytes(self) -> int:
        """Host bytes the engine asked to pin that are alive now (modelled: nothing is pinned)."""
        return sum(storage.nbytes() for storage in self._pinned.values())
