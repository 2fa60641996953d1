"""A CUDA target's attention on fake tensors: `scaled_dot_product_attention` runs the kernel CUDA would.

A CUDA target is traced on the lazy device (_allocator.py, TRACED_DEVICE), where torch has no fused attention
kernel, so SDPA would take its math path and keep the s x s probabilities of every head, which no CUDA kernel
keeps. For lazy tensors SDPA is therefore given a kernel that chooses as torch's CUDA dispatch does for an
Ampere-or-newer GPU (flash, then memory-efficient, then math) and calls the chosen kernel's own op: its meta
function makes the outputs the CUDA kernel makes (the output, an fp32 logsumexp per query, padded to 32 queries
by the memory-efficient kernel), and its autograd formula keeps what the CUDA kernel keeps for backward.
`forced_flash()` makes every call take the flash kernel, as FlashAttention-2 (`--attention flash`) does.
The kernel is registered once per process, for the lazy device alone, which only dry runs use.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

from ._allocator import TRACED_DEVICE

_FORCE_FLASH: ContextVar[bool] = ContextVar("zero_dry_run_force_flash", default=False)
_LIBRARY: list[torch.library.Library] = []  # kept alive: the registration lasts as long as the library object
HALF_DTYPES = (torch.float16, torch.bfloat16)
FLASH_MAX_HEAD_DIM = 256


def cuda_kernel(query: torch.Tensor, key: torch.Tensor, attn_mask: torch.Tensor | None, enable_gqa: bool) -> str:
    """"flash", "efficient" or "math": the kernel torch's CUDA dispatch picks for these inputs (sdp_utils.cpp)."""
    if _FORCE_FLASH.get():
        return "flash"
    head_dim = query.shape[-1]
    grouped = enable_gqa and key.shape[-3] != query.shape[-3]
    if query.dtype in HALF_DTYPES and attn_mask is None and head_dim <= FLASH_MAX_HEAD_DIM:
        return "flash"
    if not grouped and query.dtype in (*HALF_DTYPES, torch.float32):
        return "efficient"  # masks of any shape, fp32 too; no grouped-query attention
    return "math"


def _sdpa_as_on_cuda(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False, *,
                     scale: float | None = None, enable_gqa: bool = False) -> torch.Tensor:
    kernel = cuda_kernel(query, key, attn_mask, enable_gqa)
    if kernel == "flash":
        return torch.ops.aten._scaled_dot_product_flash_attention(  # type: ignore[no-any-return]
            query, key, value, dropout_p, is_causal, False, scale=scale)[0]
    if kernel == "efficient":
        return torch.ops.aten._scaled_dot_product_efficient_attention(  # type: ignore[no-any-return]
            query, key, value, attn_mask, True, dropout_p, is_causal, scale=scale)[0]
    return torch.ops.aten._scaled_dot_product_attention_math(  # type: ignore[no-any-return]
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]


def register_cuda_attention() -> None:
    """Give the traced CUDA device SDPA's CUDA kernel choice, once per process."""
    if _LIBRARY:
        return
    library = torch.library.Library("aten", "IMPL")
    # At the autograd key: SDPA is a composite op, decomposed there before any other kernel would be asked.
    library.impl("scaled_dot_product_attention", _sdpa_as_on_cuda, f"Autograd{TRACED_DEVICE['cuda'].capitalize()}")
    _LIBRARY.append(library)


@contextmanager
def forced_flash(enabled: bool = True) -> Iterator[None]:
    """Inside it, a CUDA target's SDPA takes the flash kernel whatever its inputs (FlashAttention-2)."""
    token = _FORCE_FLASH.set(enabled)
    try:
        yield
    finally:
        _FORCE_FLASH.reset(token)
