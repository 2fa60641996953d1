"""The temporaries torch's optimizer makes inside the step, on the device (ledger: `other`).

The engine steps the fp32 master with torch's optimizer and its default implementation: on a GPU the
foreach kernels, which take Adam's denominator for every tensor of the group at once
(`_foreach_sqrt(exp_avg_sq)`, then divided and shifted in place): 4 bytes per element this rank steps,
held while the step runs. (On the CPU accelerator torch steps tensor by tensor instead, holding
`exp_avg_sq.sqrt()` and its quotient for one tensor, and the previous tensor's quotient until the next
replaces it: 4 * n[i-1] + 8 * n[i] at most, which is no more than the foreach figure once the partition is
spread over several tensors.) SGD updates in place. An offloaded optimizer steps on the host with
zero-offload's fused CPU kernels, which make no parameter-sized temporaries.
"""
from __future__ import annotations

from ._formula import Q


def step_temporaries(optimizer: str, stepped: Q) -> tuple[str, Q] | None:
    """(what, bytes) of the device temporaries of one step over `stepped` fp32 elements; None when none."""
    if optimizer in ("adam", "adamw"):
        return "Adam's denominator sqrt(v) for every stepped tensor at once (torch's foreach step)", 4 * stepped
    # SGD updates in place. torch's Adafactor works one tensor at a time: its row and column means and one
    # tensor's update, not a figure per stepped element (and not estimated).
    return None
