"""Activation memory of a transformer, after Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", section 4, no tensor or sequence parallelism).

Per layer, with 16-bit activations, s tokens, micro-batch b, hidden size h and a heads:
    s*b*h*34 + 5*a*s*s*b  bytes          (the paper's sbh(34 + 5as/h))
The 5as^2b term is attention's softmax, its dropout mask and output; FlashAttention keeps
none of them, and selective recomputation recomputes them in backward: both leave 34sbh.
Full checkpointing keeps only each checkpoint's 16-bit input (2sbh): one per layer, or with a
checkpoint every k layers ceil(n/k) of them (DeepSpeed's number_checkpoints), and rebuilds one
checkpoint's k layers at a time in backward. cpu_checkpointing keeps those inputs in pinned
host memory instead of the GPU. Offloading what the layers save (offload_activations) keeps every
layer's saved activations in pinned host memory, and one layer's on the GPU: the layer running
forward, or the one whose saved tensors backward has brought back. The logits add s*b*V values in 16 bits, and the loss an fp32
log-softmax of the same size.
ZeRO partitions none of this: every GPU holds its own micro-batch's activations.
"""
from __future__ import annotations

from ._formula import Q
from ._lines import FORWARD_BACKWARD, Lines
from ._settings import Training
from ._spec import TransformerShape


def activation_lines(shape: TransformerShape, training: Training, seq_len: int) -> Lines:
    s, b = Q.var("s", seq_len), Q.var("b", training.micro_batch)
    h, a = Q.var("h", shape.hidden_size), Q.var("a", shape.num_heads)
    layers, vocab = Q.var("n", shape.num_layers), Q.var("V", shape.vocab_size)
    scale = training.param_bytes // 2  # the formula counts 2-byte values; fp32 doubles them
    linear_terms = 34 * s * b * h
    full_layer = linear_terms if training.flash_attention else linear_terms + 5 * a * s * s * b
    if scale > 1:
        linear_terms, full_layer = scale * linear_terms, scale * full_layer
    lines = Lines()
    attention = "flash attention" if training.flash_attention else "attention scores kept"
    if training.checkpointing != "full":
        per_layer = full_layer if training.checkpointing == "none" else linear_terms
        kind = attention if training.checkpointing == "none" else "attention core recomputed (selective checkpointing)"
        if training.offload_activations:
            what = f"what every layer saves for backward, in pinned host memory (offload_activations; {kind})"
            lines.add("activations", "host.pinned", what, layers * per_layer, FORWARD_BACKWARD)
            what = f"one layer's activations on the GPU at a time, made in forward or brought back in backward ({kind})"
            lines.add("activations", "gpu", what, per_layer, FORWARD_BACKWARD)
        else:
            lines.add("activations", "gpu", f"activations of every layer ({kind})", layers * per_layer, FORWARD_BACKWARD)
    else:
        _checkpointed(lines, shape, training, Q.const(2 * scale) * s * b * h, full_layer, attention)
    logits = s * b * vocab * (Q.const(training.param_bytes) + 4)
    what = f"logits ({'16-bit' if training.mixed else 'fp32'}) and the loss's fp32 log-softmax"
    lines.add("activations", "gpu", what, logits, FORWARD_BACKWARD)
    return lines


def _checkpointed(
    lines: Lines, shape: TransformerShape, training: Training, one_input: Q, full_layer: Q, attention: str
) -> None:
    """Full checkpointing: one stored input per checkpoint, and one checkpoint's layers rebuilt at a time."""
    every = training.checkpoint_every
    checkpoints = Q.var("nc", training.number_checkpoints(shape.num_layers))
    if training.cpu_checkpointing:
        where = "host.pinned"
        what = "checkpointed layer inputs, one per checkpoint, in pinned host memory (cpu_checkpointing)"
    else:
        where, what = "gpu", "checkpointed layer inputs, one per checkpoint (full checkpointing)"
    lines.add("activations", where, what, checkpoints * one_input, FORWARD_BACKWARD)
    rebuilt = min(every, shape.num_layers)
    if rebuilt == 1:
        what = f"one layer's activations, rebuilt at a time ({attention})"
        lines.add("activations", "gpu", what, full_layer, FORWARD_BACKWARD)
    else:
        what = f"one checkpoint's {rebuilt} layers' activations, rebuilt at a time ({attention})"
        lines.add("activations", "gpu", what, Q.var("k", rebuilt) * full_layer, FORWARD_BACKWARD)
