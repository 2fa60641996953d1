"""What the CPU-optimizer tests share: parameters of odd sizes, the same gradients for several copies,
and running a test on each kernel (the fused op, torch's) with the tolerance each promises."""
from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from zero_offload.optim import KERNEL_ENV

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


# The two ways a CPU optimizer steps: the fused C++ op (ZERO_CPU_OPTIMIZER_KERNEL=native makes a
# failed build an error, not a fallback) and torch's kernels.
KERNELS = ["native", "torch"]


@pytest.fixture(params=KERNELS)
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once on each kernel; the value names the one in use."""
    monkeypatch.setenv(KERNEL_ENV, request.param)
    return request.param


def ulp(dtype: torch.dtype, magnitude: torch.Tensor) -> torch.Tensor:
    """One unit in the last place of `dtype` at each element's magnitude (fp32 tensors, for comparing)."""
    # |x| in [2**(e-1), 2**e) (frexp's e) has an ulp of eps * 2**(e-1).
    exponent = torch.frexp(magnitude.float().abs().clamp_min(torch.finfo(dtype).tiny))[1]
    return torch.ldexp(torch.full(magnitude.shape, torch.finfo(dtype).eps), exponent - 1)


def assert_matches(kernel: str, ours: Sequence[torch.Tensor], theirs: Sequence[torch.Tensor]) -> None:
    """torch's kernels: the same bits. The fused op: fp32 and fp64 within 1e-6 (max abs difference),
    16-bit params within one ulp of their dtype."""
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        if kernel == "torch":
            assert torch.equal(a, b)
        elif a.dtype in (torch.float32, torch.float64):
            assert (a - b).abs().max().item() <= 1e-6
        else:
            assert torch.all((a.float() - b.float()).abs() <= ulp(a.dtype, b))
