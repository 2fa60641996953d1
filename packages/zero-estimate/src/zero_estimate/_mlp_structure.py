"""What a transformer layer's MLP and norms save for backward, from the names a config gives them.

`saved_tensors(activation, gated)`: how many tensors of the MLP's width i autograd keeps (_activations.py).
A non-gated MLP keeps what its activation saves plus the output projection's input: ReLU saves its output,
which is that input too (1); GELU, its tanh form as one kernel, and SiLU save their input (2); the tanh
GELU written out as Python ops (transformers' gelu_new, GPT-2's and Phi's) keeps its input, tanh's output,
0.5*x, 1 + tanh and their product (5). A gated MLP (SwiGLU) also keeps the up projection's output and the
product that feeds the output projection (+2).
"""
from __future__ import annotations

_NON_GATED = {"relu": 1, "gelu": 2, "gelu_pytorch_tanh": 2, "silu": 2, "swish": 2, "gelu_new": 5,
              "gelu_fast": 5, "quick_gelu": 3}
DEFAULT_ACTIVATION = "gelu"


def saved_tensors(activation: str | None, gated: bool) -> int:
    """i-wide tensors the MLP keeps; an activation not in the table counts as GELU's 2."""
    kept = _NON_GATED.get((activation or DEFAULT_ACTIVATION).lower(), 2)
    return kept + 2 if gated else kept
