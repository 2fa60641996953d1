"""The dry run's allocator: every fake storage an op creates, counted as the target device's allocator would.

A TorchDispatchMode above FakeTensorMode sees each op's outputs (fake tensors: a shape, a dtype, a device, no
memory) and counts each new storage once, until a weak reference says it died, like the storage tracker. The
CUDA caching allocator hands out blocks in multiples of 512 bytes, and its `memory_allocated` counts the
blocks, so on a CUDA target each storage counts rounded up to 512; the CPU allocator's count is exact.
What an op allocates inside its kernel and frees before returning (a workspace) never appears as an output,
so a dry run does not see it: the report says so.
"""
from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

CUDA_BLOCK_BYTES = 512
# A CPU build of torch cannot make even a fake CUDA tensor's view, so a CUDA target is traced on fake tensors of
# the "lazy" device type, which needs no backend, and every report names it "cuda". The engine never branches on
# the device type's name, only on whether it is the host's.
TRACED_DEVICE = {"cuda": "lazy", "cpu": "cpu"}
TARGET_OF = {traced: target for target, traced in TRACED_DEVICE.items()}


def block_bytes(nbytes: int, device: str) -> int:
    """What the allocator of the device traced as `device` counts for a storage of `nbytes`."""
    if TARGET_OF.get(device) == "cuda" and nbytes > 0:
        return -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES
    return nbytes


class FakeAllocator(TorchDispatchMode):
    """Counts fake storages per device type; enter it after FakeTensorMode, so that it sees that mode's outputs."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # unannotated in torch
        self._current: dict[str, int] = defaultdict(int)
        self._peak: dict[str, int] = defaultdict(int)
        # storage key -> (the storage, weakly; its device type): a fake storage's own device is "meta"
        self._seen: dict[int, tuple[weakref.ref[torch.UntypedStorage], str]] = {}

    def current_bytes(self, device: str) -> int:
        return self._current[device]

    def peak_bytes(self, device: str) -> int:
        return self._peak[device]

    def reset_peak(self, device: str) -> None:
        self._peak[device] = self._current[device]

    def device_of(self, storage: torch.UntypedStorage) -> str | None:
        """The device type of the fake tensors on this storage, if an op under the dry run created it."""
        known = self._seen.get(storage._cdata)
        return known[1] if known is not None and known[0]() is storage else None

    def track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        if self.device_of(storage) is not None:
            return
        device = tensor.device.type
        nbytes = block_bytes(storage.nbytes(), device)
        key = storage._cdata
        self._seen[key] = (weakref.ref(storage, self._on_free(key, device, nbytes)), device)
        self._current[device] += nbytes
        self._peak[device] = max(self._peak[device], self._current[device])

    def _on_free(self, key: int, device: str, nbytes: int) -> Callable[[Any], None]:
        def release(reference: Any) -> None:
            if self._seen.get(key, (None, ""))[0] is reference:
                del self._seen[key]
            self._current[device] -= nbytes

        return release

    def __torch_dispatch__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        outputs = func(*args, **(kwargs or {}))
        for item in tree_flatten(outputs)[0]:
            if isinstance(item, torch.Tensor) and item.device.type != "meta":
                self.track(item)
        return outputs


class FakeAllocatorRuler:
    """The dry run's allocator for one device type, as the ledger's ruler (memory/ruler.py, AllocatorRuler)."""

    def __init__(self, allocator: FakeAllocator, device: str) -> None:
        self._allocator, self.device = allocator, device
        target = TARGET_OF[device]
        what = "the CUDA caching allocator's 512-byte blocks" if target == "cuda" else "the CPU allocator's bytes"
        self.name = f"dry run: fake {target} storages counted as {what}"

    def counts(self, storage: torch.UntypedStorage) -> bool:
        return storage.nbytes() > 0 and self._allocator.device_of(storage) == self.device

    def current_bytes(self) -> int:
        return self._allocator.current_bytes(self.device)

    def peak_bytes(self) -> int:
        return self._allocator.peak_bytes(self.device)

    def reset_peak(self) -> None:
        self._allocator.reset_peak(self.device)
