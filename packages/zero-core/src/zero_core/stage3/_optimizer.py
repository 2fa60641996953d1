"""Stage3Optimizer: ZeroOptimizer's step, all-gathering only the persistent parameters afterwards.

A partitioned unit's shard is updated in place by the step (the master's write-back) and
gathered only when a module needs it, so there is nothing to gather for it after the step.
"""
from __future__ import annotations

from ..engine._optimizer import ZeroOptimizer
from ._params import Stage3Params


class Stage3Optimizer(ZeroOptimizer):
    def _all_gather_params(self) -> None:
        work = []
        rank = self._comm.rank
        for group in self.groups:
            flat = group.flat
            assert isinstance(flat, Stage3Params)
            for index, layout in enumerate(flat.persistent_layouts):
                lo, hi = layout.shard_range(rank)
                work.append(self._comm.all_gather(flat.bucket(index), flat.owned(index, lo, hi), async_op=True))
        for handle in work:
            handle.wait()
