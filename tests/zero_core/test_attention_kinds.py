"""`--attention`: what each kernel keeps, on a real CPU run, a CPU dry run and a CUDA target's dry run.

A CUDA target is traced on the lazy device, where SDPA is given torch's CUDA kernel choice (zero_core.dryrun's
_attention.py): each choice is held to the backward node the CUDA kernel leaves, and the bytes it keeps to the
kernel's outputs (the output and an fp32 logsumexp per query), not the s x s probabilities.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from cli_helpers import run_zero
from zero_core.dryrun import dry_run, forced_flash
from zero_core.profile._dry import to_empty_keeping_ties
from zero_core.profile._models import PRESETS, build_model

B, HEADS, S, D = 2, 8, 128, 32


def _grad_fn(dtype: torch.dtype, mask: bool, kv_heads: int = HEADS) -> str:
    with dry_run(rank=0, world_size=1, device="cuda", total_memory=1 << 30) as run:
        device = run.accelerator.device()
        query = torch.randn(B, HEADS, S, D, dtype=dtype, device=device, requires_grad=True)
        key = torch.randn(B, kv_heads, S, D, dtype=dtype, device=device)
        attn_mask = torch.ones(B, 1, S, S, dtype=torch.bool, device=device) if mask else None
        out = F.scaled_dot_product_attention(query, key, key, attn_mask=attn_mask, enable_gqa=kv_heads != HEADS)
        return type(out.grad_fn).__name__


@pytest.mark.parametrize(("dtype", "mask", "kv_heads", "kernel"), [
    (torch.bfloat16, False, HEADS, "ScaledDotProductFlashAttentionBackward0"),
    (torch.bfloat16, False, 2, "ScaledDotProductFlashAttentionBackward0"),  # flash takes grouped heads
    (torch.float32, False, HEADS, "ScaledDotProductEfficientAttentionBackward0"),  # flash is 16-bit only
    (torch.bfloat16, True, HEADS, "ScaledDotProductEfficientAttentionBackward0"),  # flash takes no mask
    (torch.bfloat16, True, 2, "ToCopyBackward0"),  # memory-efficient takes no grouped heads: the math path
])
def test_a_cuda_targets_sdpa_takes_the_kernel_cuda_would(dtype: torch.dtype, mask: bool, kv_heads: int,
                                                         kernel: str) -> None:
    assert _grad_fn(dtype, mask, kv_heads) == kernel


def test_forced_flash_takes_the_flash_kernel_whatever_the_inputs() -> None:
    with forced_flash():
        assert _grad_fn(torch.bfloat16, True, 2) == "ScaledDotProductFlashAttentionBackward0"


def test_the_flash_kernel_keeps_a_logsumexp_per_query_not_the_probabilities() -> None:
    """The fake allocator's count after forward, besides the inputs: the output and an fp32 logsumexp per query
    and head, in 512-byte blocks, where eager attention would keep B*HEADS*S*S scores."""
    with dry_run(rank=0, world_size=1, device="cuda", total_memory=1 << 30) as run:
        device = run.accelerator.device()
        query = torch.randn(B, HEADS, S, D, dtype=torch.bfloat16, device=device, requires_grad=True)
        before = run.allocator.current_bytes(run.accelerator.traced)
        out = F.scaled_dot_product_attention(query, query, query, is_causal=True)
        kept = run.allocator.current_bytes(run.accelerator.traced) - before
        assert out.shape == (B, HEADS, S, D)
        # the output and the logsumexp (whole 512-byte blocks here), and the random seed and offset the kernel
        # returns for dropout: an 8-byte scalar each, one 512-byte block each
        assert kept == 2 * B * HEADS * S * D + 4 * B * HEADS * S + 2 * 512


def test_tied_weights_stay_tied_when_a_meta_model_gets_storage() -> None:
    model = build_model(PRESETS["qwen2-tiny"], torch.bfloat16, device="meta")
    elements = sum(param.numel() for param in model.parameters())  # a shared parameter is listed once
    with FakeTensorMode(allow_non_fake_inputs=True):
        faked = to_empty_keeping_ties(model, torch.device("cpu"))
    assert faked.lm_head.weight is faked.model.embed_tokens.weight  # type: ignore[union-attr]
    assert faked.lm_head.weight.device.type == "cpu"  # type: ignore[union-attr]
    assert sum(param.numel() for param in faked.parameters()) == elements


def _kernels(report: dict[str, Any]) -> list[list[str]]:
    return [setting["attention"]["kernels"] for setting in report["settings"]]


@pytest.mark.parametrize("dry", [False, True])
def test_the_report_names_the_kernel_that_ran(dry: bool) -> None:
    common = ["profile", "--model", "llama-tiny", "--stages", "2", "--seq-len", "32", "--steps", "1", "--json"]
    where = ["--dry-run", "--device", "cpu"] if dry else ["--nproc", "1"]
    for attention, kernel in (("sdpa", "torch's flash kernel for CPU"), ("eager", "eager attention")):
        done = run_zero(*common, *where, "--attention", attention, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads(done.stdout)
        assert report["attention"] == attention
        assert [[name.split(" (")[0].split(":")[0] for name in names] for names in _kernels(report)] == [[kernel]]


@pytest.mark.parametrize(("args", "message"), [
    (["--dry-run", "--device", "cpu"], "--attention flash: FlashAttention-2 runs on CUDA devices only, not on "
                                       "--device cpu; pass --attention sdpa"),
    ([], "--attention flash: FlashAttention-2 runs on CUDA devices only, not on this machine's accelerator"),
    (["--dry-run", "--ds-config", "fp32.json"], "--attention flash: FlashAttention-2 computes in fp16 or bf16"),
])
def test_flash_where_it_cannot_run_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "fp32.json").write_text(json.dumps({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}))
    args = [str(tmp_path / arg) if arg.endswith(".json") else arg for arg in args]
    done = run_zero("profile", "--model", "llama-tiny", "--attention", "flash", *args)
    assert done.returncode == 2 and message in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr
