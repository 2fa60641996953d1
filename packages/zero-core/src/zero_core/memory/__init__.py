"""Memory accounting: the storage tracker and the engine's ledger."""
from .active import active_tracker
from .ledger import MemoryLedger
from .levers import LeverSetup, MeasuredLever, measured_levers
from .placement import Placement, location
from .report import MemoryReport
from .tracker import StorageTracker

__all__ = ["LeverSetup", "MeasuredLever", "measured_levers", "MemoryLedger", "MemoryReport", "Placement", "StorageTracker", "active_tracker", "location"]
