"""Memory accounting: the storage tracker, the engine's ledger and DeepSpeed's see_memory_usage."""
from .active import active_tracker
from .ledger import CATEGORIES, MemoryLedger
from .report import MemoryReport
from .see_memory import see_memory_usage
from .tracker import StorageTracker

__all__ = ["CATEGORIES", "MemoryLedger", "MemoryReport", "StorageTracker", "active_tracker", "see_memory_usage"]
