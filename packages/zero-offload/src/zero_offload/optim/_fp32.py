"""Stepping 16-bit params whose optimizer states are fp32.

torch's fused kernels want one dtype per param, its grad and its states. For a bf16/fp16 param
with fp32 states, each batch of params and grads is widened into fp32 scratch, stepped there,
and rounded back into the param: the same numbers as an fp32 step of the widened param.
The scratch holds one batch, not a second fp32 copy of every param.
"""
from __future__ import annotations

import torch

from ._lists import CACHE_TILE, Kernel, StepLists, batches

# Elements per batch. On one thread, a cache tile: the scratch stays in cache from widening to
# rounding back. On more, every op forks an OpenMP team, which on a busy machine costs 0.1-0.4 ms
# (15 us on one thread), so fewer, larger batches: bf16 Adam over 33.5M params on 2 busy cores
# took 1085 ms per step with 2**18 and 270 ms with 2**22 (one thread: 174 and 200 ms).
_MANY_THREADS_BATCH = 1 << 22


def step_widened(kernel: Kernel, lists: StepLists) -> None:
    """Run `kernel` on fp32 copies of `lists`' 16-bit params and grads; states are fp32 already."""
    limit = CACHE_TILE if torch.get_num_threads() == 1 else _MANY_THREADS_BATCH
    size = min(lists.numel(), limit)
    param_scratch = torch.empty(size, dtype=torch.float32)
    grad_scratch = torch.empty(size, dtype=torch.float32)
    for batch in batches(lists, limit):
        sizes = [param.numel() for param in batch.params]
        params32 = list(param_scratch[: sum(sizes)].split(sizes))
        grads32 = list(grad_scratch[: sum(sizes)].split(sizes))
        torch._foreach_copy_(params32, batch.params)
        torch._foreach_copy_(grads32, batch.grads)
        kernel(StepLists(batch.states, params32, grads32, batch.steps))
        torch._foreach_copy_(batch.params, params32)
