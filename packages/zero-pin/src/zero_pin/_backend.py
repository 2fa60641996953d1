"""The interface every pin backend implements (built-in or from a plugin)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class PinBackend(ABC):
    """Page-locks host memory. Register a subclass through `zero_register_pin_backends`;
    DS_PIN_MEMORY_BACKEND selects one by name. One instance serves the whole process.
    """

    #: The name it was registered under, set when it is selected; pinned bytes are accounted under it.
    name: str = ""

    @classmethod
    @abstractmethod
    def available(cls) -> tuple[bool, str]:
        """Whether the backend can pin here, and why (or why not). Must not raise or build anything."""

    @abstractmethod
    def pin_memory(self, tensor: torch.Tensor, make_copy: bool = True, match_shape: bool = True) -> torch.Tensor:
        """Return a pinned tensor: a copy of `tensor` (make_copy) or uninitialised memory for as
        many elements, shaped like `tensor` (match_shape) or flat."""

    def empty(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """A flat, uninitialised pinned tensor of `numel` elements, born pinned: nothing is copied.

        Backends override it to skip the temporary this default pins (a plugin need not)."""
        import torch

        return self.pin_memory(torch.empty(numel, dtype=dtype), make_copy=False, match_shape=False)

    @abstractmethod
    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """True when the tensor's memory lies in memory pinned by this backend (views included)."""

    @abstractmethod
    def unpin_memory(self, tensor: torch.Tensor) -> bool:
        """Release the lock on the tensor's memory at once; True when something was unlocked."""
