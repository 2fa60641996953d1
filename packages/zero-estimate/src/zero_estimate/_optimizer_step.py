"""The temporaries torch's optimizer makes inside the step, on the device (ledger: `other`).

The engine steps the fp32 master with torch's optimizer, whose implementation decides them
(Training.optimizer_impl):
- foreach (torch's default on a GPU) takes Adam's denominator for every tensor of the group at once
  (`_foreach_sqrt(exp_avg_sq)`, then divided and shifted in place): 4 bytes per element this rank steps,
  held while the step runs;
- single-tensor (torch's default on a CPU device) steps one master tensor at a time, holding
  `exp_avg_sq.sqrt()` and its quotient for tensor i while the previous tensor's quotient is still
  alive: max over i of 4 * n[i-1] + 8 * n[i] bytes, n the master tensors' elements in step order;
- fused kernels make no parameter-sized temporaries.
SGD updates in place. An offloaded optimizer steps on the host with zero-offload's fused CPU kernels,
which make none either.
"""
from __future__ import annotations

from ._formula import Q


def step_temporaries(optimizer: str, impl: str, stepped: Q, tensors: list[int] | None) -> tuple[str, Q] | None:
    """(what, bytes) of the device temporaries of one step over `stepped` fp32 elements in master tensors of
    `tensors` elements (step order; None: unknown, taken as one tensor); None when there are none."""
    if optimizer not in ("adam", "adamw") or impl == "fused":
        # SGD updates in place. torch's Adafactor works one tensor at a time: its row and column means and one
        # tensor's update, not a figure per stepped element (and not estimated).
        return None
    if impl == "foreach":
        return "Adam's denominator sqrt(v) for every stepped tensor at once (torch's foreach step)", 4 * stepped
    sizes = tensors or [stepped.value]
    peak = max(4 * previous + 8 * size for previous, size in zip([0, *sizes], sizes))
    what = "Adam's sqrt(v) and quotient for one master tensor, and the previous one's quotient (single-tensor step)"
    return what, Q(peak, "max(4 * n[i-1] + 8 * n[i])", f"{peak:,}")
