"""The temporaries torch's optimizer makes inside the step, on the device (ledger: `other`).

The engine steps the fp32 master with torch's optimizer, whose implementation decides them
(Training.optimizer_impl):
- foreach (torch's default on a GPU) takes Adam's denominator for every tensor of the group at once
  (`_foreach_sqrt(exp_avg_sq)`, then divided and shifted in place): 4 bytes per element this rank steps,
  held while the step runs;
- single-tensor (torch's default on a CPU device) steps one master tensor at a time, holding
  `exp_avg_sq.sqrt()` and its quotient for tensor i while the previous tensor's quotient is still
  alive: max over i of 4 * n[i-1] + 8 * n[i] bytes, n the master tensors' elements in step order;
- fused kernels make no parameter-sized temporaries;
- at stage 3 the engine steps one sub-group (a master tensor, cut at sub_group_size) per call, so only
  the largest sub-group's temporaries exist at once.
SGD updates in place. An offloaded optimizer steps on the host with zero-offload's fused CPU kernels,
which make none either.
"""
from __future__ import annotations

from ._formula import Q


def step_temporaries(optimizer: str, impl: str, stepped: Q, tensors: list[int] | None,
                     sub_group: int | None = None) -> tuple[str, Q] | None:
    """(what, bytes) of the device temporaries of one step over `stepped` fp32 elements in master tensors of
    `tensors` elements (step order; None: unknown, taken as one tensor); None when there are none. With
    `sub_group` the engine steps each master tensor in views of at most that many elements, one call each
    (stage 3's plan): one view's temporaries at a time."""
    if optimizer not in ("adam", "adamw") or impl == "fused":
        # SGD updates in place. torch's Adafactor works one tensor at a time: its row and column means and one
        # tensor's update, not a figure per stepped element (and not estimated).
        return None
    sizes = tensors or [stepped.value]
    if sub_group is not None:
        largest = max((min(size, sub_group) for size in sizes), default=0)
        per_element = 4 if impl == "foreach" else 8
        what = (f"Adam's {'denominator sqrt(v)' if impl == 'foreach' else 'sqrt(v) and quotient'} for one "
                f"sub-group, the largest stepped alone ({impl} step, one call per sub-group)")
        return what, Q(per_element * largest, f"{per_element} * max(min(n[i], sub_group_size))",
                       f"{per_element} * {largest:,}")
    if impl == "foreach":
        return "Adam's denominator sqrt(v) for every stepped tensor at once (torch's foreach step)", 4 * stepped
    peak = max(4 * previous + 8 * size for previous, size in zip([0, *sizes], sizes))
    what = "Adam's sqrt(v) and quotient for one master tensor, and the previous one's quotient (single-tensor step)"
    return what, Q(peak, "max(4 * n[i-1] + 8 * n[i])", f"{peak:,}")
