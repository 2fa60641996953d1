"""Dry runs: the real engine on fake tensors under a fake process group (`zero profile --dry-run`)."""
from ._accelerator import DEVICES, DryRunAccelerator
from ._attention import forced_flash
from ._allocator import CUDA_BLOCK_BYTES, TARGET_OF, TRACED_DEVICE, FakeAllocator, FakeAllocatorRuler, block_bytes
from ._session import DryRun, dry_run

__all__ = ["CUDA_BLOCK_BYTES", "DEVICES", "DryRun", "DryRunAccelerator", "FakeAllocator", "FakeAllocatorRuler",
           "TARGET_OF", "TRACED_DEVICE", "block_bytes", "dry_run", "forced_flash"]
