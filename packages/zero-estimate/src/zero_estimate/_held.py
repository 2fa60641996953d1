"""Stage 3 with memory_efficient_linear false: which gathered linear weights autograd keeps.

The stock F.linear saves its weight only to compute the gradient of its input. When nothing before the
first block is trainable (a LoRA base: frozen embeddings and norms), the first block's linears that read
the block's input directly get an input that needs no gradient, and their weights are not kept: the
attention's q/k/v projections, and the MLP's first projection where it also reads the block input
(GPT-NeoX's parallel residual). Every other linear weight above the persistence threshold is kept.
"""
from __future__ import annotations

from ._spec import ModelSpec

# Linears that read a block's (normed) input: attention's projections, GPT-NeoX's parallel MLP.
_READ_BLOCK_INPUT = frozenset({"q_proj", "k_proj", "v_proj", "query_key_value", "c_attn", "query", "key",
                               "value", "q", "k", "v", "dense_h_to_4h"})


def held_linear_weights(spec: ModelSpec, above: int) -> int | None:
    """Elements of the gathered linear weights autograd keeps until backward; None without shapes."""
    total = spec.linear_weight_params(above=above)
    if total is None:
        return None
    skipped, seen_counted = 0, set[str]()
    for m in spec.instances():
        block = m.count > 1 or any(part.isdigit() for part in m.path.split("."))
        if not block:
            if m.trainable and not seen_counted:
                return total  # something before the blocks is trainable: every input needs a gradient
            continue
        first = m.path not in seen_counted if m.count > 1 else _in_first_block(m.path)
        seen_counted.add(m.path)
        if first and _module_name(m.path) in _READ_BLOCK_INPUT and m.weight_params > above:
            skipped += m.weight_params
    return total - skipped


def _in_first_block(path: str) -> bool:
    digits = [part for part in path.split(".") if part.isdigit()]
    return bool(digits) and digits[0] == "0"


def _module_name(path: str) -> str:
    """The linear's own name: a LoRA wrapper's frozen `base` takes its parent's name."""
    parts = [part for part in path.split(".") if part != "base"]
    return parts[-1] if parts else path
