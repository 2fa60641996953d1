"""Activation memory of a transformer, after Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", section 4, no tensor or sequence parallelism), with
the attention scores and the loss as Hugging Face's eager attention and causal-LM loss keep them.

Per layer, s tokens, micro-batch b, hidden size h, MLP width i, a heads, b_p bytes per 16-bit or fp32 value:
    ((6*b_p + 2*c_n + 2)*h + m*b_p*i)*s*b + c*a*s*s*b  bytes
derived from the layer's structure, as autograd saves it: the attention block keeps its projections' input,
Q, K and V (eager attention repeats grouped K and V heads to every query head before the matmul it saves them
for, so they are h wide whatever num_key_value_heads is) and the output projection's input (5*b_p*h); the MLP
keeps its input (b_p*h) and m tensors of width i (m: 1 for ReLU, whose output is also the next input; 2 for
GELU or SiLU, input and output; 4 for a gated SwiGLU MLP, the gate's output, its SiLU, the up projection and
their product; 5 for the tanh GELU written out as Python ops, gelu_new); each of the two norms keeps its input,
c_n bytes per value (b_p, or 4 + b_p where Hugging Face's RMSNorm saves an fp32 copy and the 16-bit cast);
2 more are the 1-byte dropout masks of the attention and MLP outputs, dropped when the model drops nothing out
of its hidden states (TransformerShape.hidden_dropout). With a 4h GELU MLP and LayerNorm this is the paper's
34sbh: (16*b_p + 2)*s*b*h. c is what a layer keeps per attention score: the softmax in
fp32 (16-bit models take it in fp32 too) and, in 16 bits, its cast back for the matmul with the
values; with dropout on the probabilities (TransformerShape.attention_dropout) a 1-byte mask and
the dropped copy instead of the cast. FlashAttention keeps no scores, and selective recomputation
recomputes them in backward: both leave the first term.
Full checkpointing keeps only each checkpoint's input (b_p*s*b*h): one per layer, or with a
checkpoint every k layers ceil(n/k) of them (DeepSpeed's number_checkpoints), and rebuilds one
checkpoint's k layers at a time in backward. cpu_checkpointing keeps those inputs in pinned host
memory instead of the GPU. Offloading what the layers save (offload_activations) keeps every
layer's saved activations in pinned host memory, and one layer's on the GPU: the layer running
forward, or the one whose saved tensors backward has brought back. A rebuilt or brought-back layer
is held while a layer runs, not at the loss (instant "late", _instants.py).
The loss (instant "loss"): at the loss the logits (b_p*s*b*V), their fp32 copy (16-bit models) and
the fp32 log-softmax; at the start of backward the saved log-softmax and two fp32 gradients of its
size (the nll's, and the log-softmax's input gradient).
ZeRO partitions none of this: every GPU holds its own micro-batch's activations.
"""
from __future__ import annotations

from zero_plugins import AttentionKind, Category

from ._formula import Q, largest
from ._lines import BACKWARD, FORWARD, FORWARD_BACKWARD, Lines
from ._settings import Training
from ._spec import TransformerShape

LOGSUMEXP_BYTES = 4  # a fused kernel's fp32 logsumexp, one per query and head


def activation_lines(shape: TransformerShape, training: Training, seq_len: int) -> Lines:
    s, b = Q.var("s", seq_len), Q.var("b", training.micro_batch)
    h, a = Q.var("h", shape.hidden_size), Q.var("a", shape.num_heads)
    layers, vocab = Q.var("n", shape.num_layers), Q.var("V", shape.vocab_size)
    fused = training.attention != AttentionKind.EAGER
    linear_terms = _linear_terms(shape, training, s * b, h)
    full_layer = linear_terms + (Q.const(LOGSUMEXP_BYTES) * a * s * b if fused else _scores(shape, training) * a * s * s * b)
    lines = Lines()
    attention = f"{training.attention} attention: {'a logsumexp per query' if fused else 'probabilities kept'}"
    if training.checkpointing != "full":
        per_layer = full_layer if training.checkpointing == "none" else linear_terms
        kind = attention if training.checkpointing == "none" else "attention core recomputed (selective checkpointing)"
        if training.offload_activations:
            what = f"what every layer saves for backward, in pinned host memory (offload_activations; {kind})"
            lines.add(Category.ACTIVATIONS, "host.pinned", what, layers * per_layer, FORWARD_BACKWARD)
            what = f"one layer's activations on the GPU at a time, made in forward or brought back in backward ({kind})"
            lines.add(Category.ACTIVATIONS, "gpu", what, per_layer, FORWARD_BACKWARD, instant="late")
        else:
            lines.add(Category.ACTIVATIONS, "gpu", f"activations of every layer ({kind})", layers * per_layer, FORWARD_BACKWARD)
    else:
        one_input = Q.const(training.param_bytes) * s * b * h
        _checkpointed(lines, shape, training, one_input, full_layer, attention)
    scores = None if fused else a * s * s * b
    if scores is not None:
        lines.add(Category.ACTIVATIONS, "gpu", "one layer's scores in fp32 while its softmax runs (eager attention)",
                  Q.const(4) * scores, FORWARD, instant="late")
    # Where every layer's activations are held when backward starts, the top layer's gradients come once the
    # loss's are freed, and its kept tensors are freed as they are used; where layers are rebuilt or brought
    # back, beside the layer that is.
    at_the_top = training.checkpointing == "none" and not training.offload_activations
    _loss(lines, training, s * b * vocab, _softmax_backward(training, scores) if at_the_top and scores else None)
    if not at_the_top:
        layer_backward = linear_terms if scores is None else largest(linear_terms, _softmax_backward(training, scores))
        if training.checkpointing == "selective" and scores is not None:
            what = "one layer's attention probabilities, recomputed for its backward (selective checkpointing)"
            lines.add(Category.ACTIVATIONS, "gpu", what, _scores(shape, training) * scores, BACKWARD, instant="late")
        what = f"one layer's gradients as it runs backward, beside the layer rebuilt or brought back ({attention})"
        lines.add(Category.ACTIVATIONS, "gpu", what, layer_backward, BACKWARD,
                  instant="late")
    return lines


def _linear_terms(shape: TransformerShape, training: Training, tokens: Q, h: Q) -> Q:
    """Bytes a layer keeps besides its attention scores, from its structure (the module docstring): the
    attention block, the MLP's input and its i-wide tensors, the two norms' inputs, and the 1-byte dropout
    masks of the attention and MLP outputs when the model drops its hidden states out."""
    bp = training.param_bytes
    masks = 0 if shape.hidden_dropout is False else 2
    default = shape.intermediate_size is None and shape.mlp_saved_tensors is None and shape.norms_per_layer == 2
    if default and not shape.norm_upcast:
        return Q.const(16 * bp + masks) * tokens * h  # no structure known (counts): the paper's 4h GELU MLP
    norm = 4 + bp if shape.norm_upcast else bp
    width = Q.var("i", shape.intermediate_size or 4 * shape.hidden_size)
    saved = 2 if shape.mlp_saved_tensors is None else shape.mlp_saved_tensors
    # the attention block (5 b_p h), the MLP's input unless it reads the attention's (one norm), the norms
    mlp_input = bp if shape.norms_per_layer > 1 else 0
    kv = shape.num_kv_heads
    if kv is None or training.attention == AttentionKind.EAGER:  # eager repeats K and V to every query head
        per_h = 5 * bp + mlp_input + shape.norms_per_layer * norm + masks
        return (Q.const(per_h) * h + Q.const(saved * bp) * width) * tokens
    # a fused kernel keeps K and V as the projections made them, num_kv_heads wide
    per_h = 3 * bp + mlp_input + shape.norms_per_layer * norm + masks
    kv_width = Q.var("h_kv", shape.hidden_size * kv // shape.num_heads)
    return (Q.const(per_h) * h + Q.const(2 * bp) * kv_width + Q.const(saved * bp) * width) * tokens


def _scores(shape: TransformerShape, training: Training) -> Q:
    """Bytes per attention score a layer keeps (eager attention, as Hugging Face computes it): the softmax
    output in fp32 (16-bit models take it in fp32 too) and, in 16-bit, its cast back for the matmul with
    the values; with dropout on the probabilities, a 1-byte mask and the dropped copy."""
    kept = 4 + (training.param_bytes if training.mixed else 0)
    if shape.attention_dropout is not False:
        kept += 1 + training.param_bytes
    return Q.const(kept)


def _softmax_backward(training: Training, scores: Q) -> Q:
    """Eager attention's backward, beside what it keeps: the fp32 gradient of the probabilities and the
    softmax's fp32 input gradient beside the fp32 probabilities (their 16-bit cast is freed once the matmul
    that kept it has run backward). A layer rebuilt from its checkpoint holds at least as much again as it
    keeps besides (the gradients of its MLP's and attention block's tensors, made while the rebuilt ones are
    held): the larger of the two (measured with the dry run, docs/memory-model.md)."""
    held_beside = 4 + training.param_bytes if training.mixed else 4
    return Q.const(4 + 4 + 4 - held_beside) * scores


def _loss(lines: Lines, training: Training, tokens_vocab: Q, softmax_backward: Q | None) -> None:
    """The logits and the loss. Hugging Face's loss upcasts the logits to fp32 (16-bit models) and takes an
    fp32 log-softmax, the one of them it saves for backward; the logits die with the forward that made them.
    At the loss the logits, their fp32 copy and the log-softmax are held. Backward starts with the nll's
    fp32 gradient and the log-softmax's fp32 input gradient beside the saved log-softmax (the 16-bit cast of
    that gradient comes once the nll's is freed, and is smaller). `softmax_backward`, where every layer's
    activations are held then, is the top layer's eager attention backward, which comes once the loss's
    gradients are freed: the larger of the two is held beside them."""
    word = "16-bit" if training.mixed else "fp32"
    what = f"logits ({word}), until the loss is computed"
    lines.add(Category.ACTIVATIONS, "gpu", what, training.param_bytes * tokens_vocab, FORWARD, instant="loss")
    lines.add(Category.ACTIVATIONS, "gpu", "the loss's fp32 log-softmax", 4 * tokens_vocab, FORWARD_BACKWARD,
              instant="loss")
    if training.mixed:
        lines.add(Category.ACTIVATIONS, "gpu", "the loss's fp32 copy of the logits", 4 * tokens_vocab, FORWARD,
                  instant="loss")
    what = "the loss's gradients: the nll's and the log-softmax's input gradient (fp32)"
    if softmax_backward is None:
        lines.add(Category.ACTIVATIONS, "gpu", what, 8 * tokens_vocab, BACKWARD, instant="loss")
        return
    what = f"the larger of {what} and the top layer's softmax backward (eager attention), once they are freed"
    lines.add(Category.ACTIVATIONS, "gpu", what, largest(8 * tokens_vocab, softmax_backward), BACKWARD,
              instant="loss")


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
    # held until its layer is rebuilt: all of them while backward rebuilds the top layer (_instants.py, "held")
    lines.add(Category.ACTIVATIONS, where, what, checkpoints * one_input, FORWARD_BACKWARD, instant="held")
    rebuilt = min(every, shape.num_layers)
    if rebuilt == 1:
        what = f"one layer's activations, rebuilt at a time ({attention})"
        rebuilt_q = full_layer
    else:
        what = f"one checkpoint's {rebuilt} layers' activations, rebuilt at a time ({attention})"
        rebuilt_q = Q.var("k", rebuilt) * full_layer
    # held while layers run (forward, or their rebuild in backward), not at the loss (_instants.py)
    lines.add(Category.ACTIVATIONS, "gpu", what, rebuilt_q, FORWARD_BACKWARD, instant="late")
