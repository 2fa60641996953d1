"""DeepSpeed, the reference peer, imported for side-by-side tests (never a dependency of our packages)."""
from __future__ import annotations

import importlib
from types import ModuleType


def import_deepspeed() -> ModuleType:
    """`deepspeed`, without the shared-memory all-reduce op its comm compiles when it starts.

    That op serves only `inference_all_reduce`, which training never calls, and compiling it costs
    about a minute on a 2-core machine whose extension cache is empty (a fresh CI machine's).
    """
    deepspeed = importlib.import_module("deepspeed")
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    return deepspeed
