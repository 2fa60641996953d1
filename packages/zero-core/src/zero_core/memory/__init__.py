"""Memory accounting: the storage tracker and the engine's ledger."""
from .active import active_tracker
from .fake import count_fake_tensors, counts_fake_tensors, is_fake, read_bool, read_float, read_int
from .ledger import MemoryLedger
from .levers import LeverSetup, MeasuredLever, measured_levers
from .placement import Placement, location
from .report import MemoryReport
from .tracker import StorageTracker

__all__ = ["count_fake_tensors", "counts_fake_tensors", "is_fake", "read_bool", "read_float", "read_int", "LeverSetup", "MeasuredLever", "measured_levers", "MemoryLedger", "MemoryReport", "Placement", "StorageTracker", "active_tracker", "location"]
