"""The attention kinds a model can run, as `zero profile`, `zero estimate` and `zero plan` name them (--attention).

One list for the engine's side (which Hugging Face implementation a profiled model is built with) and the
estimator's (what each kind keeps for backward), so the two always mean the same thing by a name.
"""
from __future__ import annotations

from enum import Enum


class AttentionKind(str, Enum):
    """What a layer's attention core keeps for backward, by the kernel that runs it.

    SDPA is torch's `scaled_dot_product_attention`, Hugging Face's default: on a GPU it runs a fused kernel
    (flash, or memory-efficient with a mask) that keeps the output and an fp32 logsumexp per query; on a CPU,
    torch's flash kernel for CPU where it applies, else the math path, which keeps the probabilities. FLASH is
    FlashAttention-2 (`flash_attention_2`, CUDA only): the output and the logsumexp. EAGER is Hugging Face's
    Python attention: the s x s probabilities of every head.
    """

    SDPA = "sdpa"
    FLASH = "flash"
    EAGER = "eager"

    def __str__(self) -> str:  # the name as written on the command line and in JSON, on every Python
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


#: transformers' default since 4.36: what `--attention` means when it is not given.
DEFAULT_ATTENTION = AttentionKind.SDPA
