"""Stepping 16-bit params whose optimizer states are fp32.

torch's fused kernels want one dtype per param, its grad and its states. For a bf16/fp16 param
with fp32 states, each batch of params and grads is widened into fp32 scratch, stepped there,
and rounded back into the param: the same numbers as an fp32 step of the widened param.
One cache tile at a time, so the scratch is small and stays in cache from widening to rounding;
no second fp32 copy of every param is kept.
"""
from __future__ import annotations

import torch

from ._lists import CACHE_TILE, Kernel, StepLists, batches


def step_widened(kernel: Kernel, lists: StepLists) -> None:
    """Run `kernel` on fp32 copies of `lists`' 16-bit params and grads; states are fp32 already."""
    size = min(lists.numel(), CACHE_TILE)
    param_scratch = torch.empty(size, dtype=torch.float32)
    grad_scratch = torch.empty(size, dtype=torch.float32)
    for batch in batches(lists, CACHE_TILE):
        sizes = [param.numel() for param in batch.params]
        params32 = list(param_scratch[: sum(sizes)].split(sizes))
        grads32 = list(grad_scratch[: sum(sizes)].split(sizes))
        torch._foreach_copy_(params32, batch.params)
        torch._foreach_copy_(grads32, batch.grads)
        kernel(StepLists(batch.states, params32, grads32, batch.steps))
        torch._foreach_copy_(batch.params, params32)
