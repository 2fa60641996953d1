"""Stage 3 with memory_efficient_linear false: which gathered linear weights autograd keeps.

The stock F.linear saves its weight only to compute the gradient of its input. When nothing before the
first block is trainable (a LoRA base: frozen embeddings and norms), the first block's linears that read
the block's input directly get an input that needs no gradient, and their weights are not kept: the
attention's q/k/v projections, and the MLP's first projection where it also reads the block input
(GPT-NeoX's parallel residual). Every other linear weight above the persistence threshold is kept.

Under full checkpointing the blocks' forward saves nothing: only the linears outside them (the LM head)
keep their weights from forward to their backward, which runs first. Backward rebuilds one checkpoint's
blocks at a time and keeps their weights until each block's backward; the running block's are the
gathered working set already, so a checkpoint of k blocks adds k - 1 blocks' weights.
"""
from __future__ import annotations

from ._spec import ModelSpec, ModuleParams

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
        if not _in_block(m):
            if m.trainable and not seen_counted:
                return total  # something before the blocks is trainable: every input needs a gradient
            continue
        first = m.path not in seen_counted if m.count > 1 else _in_first_block(m.path)
        seen_counted.add(m.path)
        if first and _module_name(m.path) in _READ_BLOCK_INPUT and m.weight_params > above:
            skipped += m.weight_params
    return total - skipped


def held_outside_checkpoints(spec: ModelSpec, above: int) -> int | None:
    """Full checkpointing: elements of the gathered weights of the linears outside the blocks that autograd
    keeps from their forward (those whose input needs a gradient: something before them trains); None
    without shapes."""
    if not spec.modules:
        return None
    held, trains_before = 0, False
    for m in spec.instances():
        if not _in_block(m) and trains_before and m.weight_params > above:
            held += m.weight_params
        trains_before = trains_before or bool(m.trainable)
    return held


def block_linear_weights(spec: ModelSpec, above: int) -> int | None:
    """Elements of one block's linear weights above `above` (the largest block's); None without shapes."""
    if not spec.modules:
        return None
    # keyed by the block's index; a repeated module (count > 1, unnumbered) stands for every block: key None
    per_block: dict[str | None, int] = {}
    for m in spec.modules:
        if _in_block(m) and m.weight_params > above:
            key = _block_index(m.path)
            per_block[key] = per_block.get(key, 0) + m.weight_params
    return max(per_block.values(), default=0)


def _in_block(m: ModuleParams) -> bool:
    return m.count > 1 or any(part.isdigit() for part in m.path.split("."))


def _block_index(path: str) -> str | None:
    """The index of the block a module path lies in ("layers.3.mlp" -> "3"); None outside numbered blocks."""
    return next((part for part in path.split(".") if part.isdigit()), None)


def _in_first_block(path: str) -> bool:
    return _block_index(path) == "0"


def _module_name(path: str) -> str:
    """The linear's own name: a LoRA wrapper's frozen `base` takes its parent's name."""
    parts = [part for part in path.split(".") if part != "base"]
    return parts[-1] if parts else path
