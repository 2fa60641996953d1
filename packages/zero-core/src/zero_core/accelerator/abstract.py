"""The interface every accelerator implements (DeepSpeed's accelerator API, trimmed to what zero uses)."""
from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar

import torch
import zero_pin

from ._copies import CopyStream

if TYPE_CHECKING:
    from ..memory.ruler import AllocatorRuler


class Accelerator(abc.ABC):
    """One kind of compute device, as seen by the engine.

    `name` is what DS_ACCELERATOR selects. `detect_priority` orders auto-detection:
    the available accelerator with the highest priority wins.
    """

    name: ClassVar[str]
    detect_priority: ClassVar[int] = 0

    # --- availability, checked before an instance is made ---
    @classmethod
    @abc.abstractmethod
    def available(cls) -> tuple[bool, str]:
        """(usable, reason), as every registered plugin class answers. The reason says why not, or what was found."""

    @classmethod
    def is_available(cls) -> bool:
        """DeepSpeed's `get_accelerator().is_available()`: whether this accelerator can be used here."""
        return cls.available()[0]

    # --- devices ---
    @abc.abstractmethod
    def communication_backend_name(self) -> str: ...

    @abc.abstractmethod
    def device_name(self, device_index: int | None = None) -> str: ...

    def current_device_name(self) -> str:
        """DeepSpeed's name of the device this process uses ("cuda:1"; "cpu")."""
        return self.device_name(self.current_device())

    def device(self, device_index: int | None = None) -> torch.device:
        return torch.device(self.device_name(device_index))

    @abc.abstractmethod
    def device_count(self) -> int: ...

    @abc.abstractmethod
    def current_device(self) -> int: ...

    @abc.abstractmethod
    def set_device(self, device_index: int) -> None: ...

    @abc.abstractmethod
    def synchronize(self, device_index: int | None = None) -> None: ...

    @abc.abstractmethod
    def manual_seed(self, seed: int) -> None: ...

    def manual_seed_all(self, seed: int) -> None:
        """DeepSpeed's seed for every device of this kind; with one generator, seeding it is seeding all."""
        self.manual_seed(seed)

    def copy_stream(self) -> CopyStream:
        """A new stream for one offload device's copies between host and device, which overlap compute where the
        accelerator has streams. This base's copies are complete when the call that issues them returns."""
        return CopyStream()

    def empty_cache(self) -> None:
        """Return cached, unused device memory to the system; an accelerator without such a cache has nothing to do."""

    # --- dtypes ---
    @abc.abstractmethod
    def is_bf16_supported(self) -> bool: ...

    @abc.abstractmethod
    def is_fp16_supported(self) -> bool: ...

    def supported_dtypes(self) -> list[torch.dtype]:
        dtypes = [torch.float32]
        if self.is_bf16_supported():
            dtypes.append(torch.bfloat16)
        if self.is_fp16_supported():
            dtypes.append(torch.float16)
        return dtypes

    # --- memory statistics (bytes) ---
    @abc.abstractmethod
    def memory_allocated(self, device_index: int | None = None) -> int: ...

    @abc.abstractmethod
    def max_memory_allocated(self, device_index: int | None = None) -> int: ...

    @abc.abstractmethod
    def memory_reserved(self, device_index: int | None = None) -> int: ...

    @abc.abstractmethod
    def max_memory_reserved(self, device_index: int | None = None) -> int: ...

    @abc.abstractmethod
    def reset_peak_memory_stats(self, device_index: int | None = None) -> None: ...

    @abc.abstractmethod
    def total_memory(self, device_index: int | None = None) -> int: ...

    @abc.abstractmethod
    def available_memory(self, device_index: int | None = None) -> int: ...

    @abc.abstractmethod
    def memory_stats_source(self) -> str:
        """Where the memory figures come from, e.g. "caching allocator" or "process RSS"."""

    def allocator_ruler(self) -> AllocatorRuler | None:
        """The allocator's exact figures (the ledger's ruler, docs/ledger.md), or None where nothing counts now."""
        return None

    def count_allocations(self) -> None:
        """Start the allocator's count where it must be asked for (the CPU's); elsewhere it always counts."""

    # --- host memory pinning: delegated to the zero-pin backend selected by DS_PIN_MEMORY_BACKEND ---
    def pin_memory(self, tensor: torch.Tensor, make_copy: bool = True, match_shape: bool = True) -> torch.Tensor:
        return zero_pin.pin_memory(tensor, make_copy=make_copy, match_shape=match_shape)

    def empty_pinned(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """A flat host buffer born pinned (nothing copied); buffers that live across steps come from here."""
        return zero_pin.empty_pinned(numel, dtype)

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        return zero_pin.is_pinned(tensor)

    def unpin_memory(self, tensor: torch.Tensor) -> bool:
        return zero_pin.unpin_memory(tensor)
