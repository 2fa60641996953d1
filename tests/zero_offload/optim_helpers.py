"""What the CPU-optimizer tests share: parameters of odd sizes, and the same gradients for several copies."""
from __future__ import annotations

from collections.abc import Sequence

import torch

# Odd sizes end in the kernels' scalar tails.
SHAPES = [(37,), (5, 7), (1000,), (3,)]


def make_params(shapes: Sequence[tuple[int, ...]] = SHAPES, dtype: torch.dtype = torch.float32,
                seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator).to(dtype) for shape in shapes]


def set_grads(param_lists: Sequence[Sequence[torch.Tensor]], seed: int) -> None:
    """The same random grads on the same-position params of every list."""
    generator = torch.Generator().manual_seed(seed)
    for params in zip(*param_lists):
        grad = torch.randn(params[0].shape, generator=generator).to(params[0].dtype)
        for param in params:
            param.grad = grad.clone()


def step_together(optimizers: Sequence[torch.optim.Optimizer], param_lists: Sequence[Sequence[torch.Tensor]],
                  steps: int = 4) -> None:
    for step in range(steps):
        set_grads(param_lists, seed=100 + step)
        for optimizer in optimizers:
            optimizer.step()


def step_with_widened_reference(optimizer: torch.optim.Optimizer, reference: torch.optim.Optimizer,
                                ours: Sequence[torch.Tensor], theirs: Sequence[torch.Tensor],
                                masters: Sequence[torch.Tensor], steps: int = 3) -> None:
    """Step `optimizer` on 16-bit `ours`, and `reference` on fp32 `masters` of `theirs`, rounded back each step."""
    for step in range(steps):
        set_grads([ours, theirs], seed=step)
        optimizer.step()
        for master, param in zip(masters, theirs):
            master.copy_(param)
            master.grad = param.grad.float()
        reference.step()
        for master, param in zip(masters, theirs):
            param.copy_(master)
