"""`--attention`: which Hugging Face attention a profiled model runs, and which kernel its figures stand for.

The kind (zero_plugins.AttentionKind) is checked against the device before anything runs: FlashAttention-2
needs a CUDA device, 16-bit compute and, for a real run, the flash-attn package. The kernel that really ran is
read from the first step's autograd graph, by the backward node each attention kernel leaves: what a figure
stands for is what was measured, not what was asked for.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import torch
from zero_plugins import AttentionKind, ZeroError

#: the backward node an attention kernel leaves in the graph -> what that kernel keeps for backward
KERNELS = {
    "ScaledDotProductFlashAttentionForCpuBackward": "torch's flash kernel for CPU (SDPA): keeps the output and an "
                                                    "fp32 logsumexp per query",
    "ScaledDotProductFlashAttentionBackward": "the flash kernel (CUDA): keeps the output and an fp32 logsumexp "
                                              "per query",
    "ScaledDotProductEfficientAttentionBackward": "the memory-efficient kernel (CUDA, SDPA with a mask or fp32): "
                                                  "keeps the output and an fp32 logsumexp per query",
    "ScaledDotProductCudnnAttentionBackward": "the cuDNN kernel (CUDA): keeps the output and an fp32 "
                                              "logsumexp per query",
    "FlashAttnFuncBackward": "FlashAttention-2 (flash-attn): keeps the output and an fp32 logsumexp per query",
}
#: without a fused kernel: eager attention, or SDPA's math path, keeps the s x s probabilities of every head
PROBABILITIES = {AttentionKind.EAGER: "eager attention: keeps the s x s probabilities of every head",
                 AttentionKind.SDPA: "SDPA's math path (no fused kernel for these inputs): keeps the s x s "
                                     "probabilities of every head"}


class AttentionArgumentError(ZeroError, ValueError):
    """--attention asks for a kernel the device or the precision cannot run."""


def check_attention(kind: AttentionKind, device: str, precision: str, *, dry_run: bool) -> None:
    """Refuse, in one line naming the flag and the fix, a kind that could not run as asked."""
    if kind is not AttentionKind.FLASH:
        return
    if device != "cuda":
        target = "--device cpu" if dry_run else "this machine's accelerator, a CPU"
        raise AttentionArgumentError(f"--attention flash: FlashAttention-2 runs on CUDA devices only, not on {target}; "
                                     "pass --attention sdpa (torch's flash kernel for CPU where it applies)")
    if precision == "fp32":
        raise AttentionArgumentError("--attention flash: FlashAttention-2 computes in fp16 or bf16, and the ds_config "
                                     "trains in fp32; enable bf16 or fp16 in the ds_config, or pass --attention sdpa")
    if not dry_run and importlib.util.find_spec("flash_attn") is None:
        raise AttentionArgumentError("--attention flash: the flash-attn package is not installed (pip install "
                                     "flash-attn); or pass --attention sdpa")


def hf_implementation(kind: AttentionKind, *, dry_run: bool) -> str:
    """transformers' attn_implementation for `kind`. A dry run's flash is SDPA forced onto the flash kernel
    (zero_core.dryrun.forced_flash): FlashAttention-2 keeps what that kernel keeps, and its package cannot run
    on fake tensors."""
    if kind is AttentionKind.FLASH:
        return "sdpa" if dry_run else "flash_attention_2"
    return str(kind)


def kernels_in_graph(loss: torch.Tensor, kind: AttentionKind) -> list[str]:
    """What the attention kernels that built `loss` keep for backward, read from its autograd graph."""
    found = sorted({KERNELS[name] for name in _node_names(loss) if name in KERNELS})
    return found or [PROBABILITIES.get(kind, PROBABILITIES[AttentionKind.EAGER])]


def _node_names(loss: torch.Tensor) -> Iterator[str]:
    """Each backward node's class name without its index (ScaledDotProductFlashAttentionBackward0 -> ...Backward)."""
    seen: set[int] = set()
    stack = [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        yield type(node).__name__.rstrip("0123456789")
        stack.extend(next_node for next_node, _ in node.next_functions)
