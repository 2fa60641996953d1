"""zero-core: ZeRO stages 0-3 over torch.distributed, accelerators, config and the memory ledger."""
from .__about__ import __version__
from .accelerator import Accelerator, get_accelerator, set_accelerator
from .memory import StorageTracker

__all__ = ["Accelerator", "StorageTracker", "__version__", "get_accelerator", "set_accelerator"]
