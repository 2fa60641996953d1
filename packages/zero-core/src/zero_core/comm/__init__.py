"""torch.distributed as the engine uses it: joining the process group (with a timeout), collectives counted in
the ledger, and a failed collective named with the step and the peers it waited on."""
from ._collectives import Collectives, Work
from ._failure import CollectiveFailed, RankMismatch
from ._process_group import ensure_process_group, init_distributed
from ._timeout import TIMEOUT_ENV, collective_timeout

__all__ = ["TIMEOUT_ENV", "CollectiveFailed", "Collectives", "RankMismatch", "Work", "collective_timeout", "ensure_process_group",
           "init_distributed"]
