"""The hook `zero plan --verify` asks for a dry run through (zero-estimate cannot import zero-core, nor torch)."""
from __future__ import annotations

from typing import Any

from zero_plugins import hookspec


@hookspec
def zero_verify_candidate(request: dict[str, Any]) -> dict[str, Any] | None:
    """Trace one training configuration with the real engine on fake CUDA tensors; None if the plugin cannot.

    `request`: "model" (a preset name or the path of a Hugging Face config.json), "ds_config" (the dict, with
    the stage, offload, buckets and memory_efficient_linear in its zero_optimization block), "nproc" (ranks),
    "micro_batch", "seq_len", "gradient_checkpointing" (every layer, through torch.utils.checkpoint),
    "lora_rank" (None: full fine-tuning), "attention" ("sdpa", "flash" or "eager"), "steps",
    "device_memory" (bytes of one GPU) and "timeout" (seconds).

    Returns bytes per rank: "gpu_peak" (the largest rank's peak), "gpu_peak_phase", "ranks" ({traced rank:
    peak}), "categories" (the ledger's categories at the peak phase), "host_peak" (host memory of one rank,
    pinned included), with "device", "optimizer_kernel", "attention_kernels" and "seconds" (the trace's).
    A refusal of the configuration raises a zero_plugins.ZeroError whose message says why.
    """
