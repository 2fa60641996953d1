"""`ZeroParamStatus`: whether a stage-3 parameter's full data is present on this rank.

DeepSpeed programs compare `param.ds_status` with these members (DeepSpeed-Chat skips gathering
a parameter that is `NOT_AVAILABLE` only when it is), so the names and values are DeepSpeed's.
`zero_core.runtime.zero.partition_parameters` re-exports it at DeepSpeed's module path.
"""
from __future__ import annotations

from enum import Enum


class ZeroParamStatus(Enum):
    # The full parameter is present on every rank and ready for use.
    AVAILABLE = 1
    # Only this rank's shard is present (the parameter is partitioned).
    NOT_AVAILABLE = 2
    # A gather of the parameter has started and not finished.
    INFLIGHT = 3
