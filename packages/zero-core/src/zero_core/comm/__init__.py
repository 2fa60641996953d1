"""torch.distributed as the engine uses it: joining the process group (with a timeout), collectives counted in
the ledger, and a failed collective named with the step and the peers it waited on; and `deepspeed.comm`'s
common calls for scripts (get_rank, get_world_size, get_local_rank, barrier, all_reduce, is_initialized)."""
from ._collectives import Collectives, Work
from ._deepspeed_api import (
    ReduceOp,
    all_reduce,
    barrier,
    get_local_rank,
    get_rank,
    get_world_size,
    is_initialized,
)
from ._failure import CollectiveFailed, RankMismatch, guarded
from ._process_group import ensure_process_group, init_distributed, is_fake_group
from ._progress import RankProgress
from ._timeout import TIMEOUT_ENV, collective_timeout

__all__ = ["TIMEOUT_ENV", "CollectiveFailed", "Collectives", "RankMismatch", "RankProgress", "ReduceOp", "Work",
           "all_reduce", "barrier", "collective_timeout", "ensure_process_group", "get_local_rank", "get_rank",
           "get_world_size", "guarded", "init_distributed", "is_fake_group", "is_initialized"]
