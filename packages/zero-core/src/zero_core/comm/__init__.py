"""torch.distributed as the engine uses it: joining the process group, and collectives counted in the ledger."""
from ._collectives import Collectives, Work
from ._process_group import ensure_process_group

__all__ = ["Collectives", "Work", "ensure_process_group"]
