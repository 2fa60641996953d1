"""Memory accounting: the storage tracker (the engine's ledger builds on it)."""
from .active import active_tracker
from .tracker import StorageTracker

__all__ = ["StorageTracker", "active_tracker"]
