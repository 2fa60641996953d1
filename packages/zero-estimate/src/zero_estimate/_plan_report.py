"""Text of `zero plan`: the configurations that fit, cheapest first, and the nearest misses."""
from __future__ import annotations

from zero_plugins import Category, format_table

from ._estimate import Estimate
from ._plan import Candidate, Limits, Plan
from ._report import describe
from ._units import gib

_DEVICE_NAMES = {"gpu": "GPU", "cpu": "host memory", "nvme": "NVMe"}


def plan_text(result: Plan) -> str:
    limits = result.limits
    candidates = result.fits + result.misses
    # The setup as given: the plan adds full checkpointing only to a setup without it.
    given = [c for c in candidates if c.estimate.training.checkpointing != "full"] or candidates
    parts = [describe(given[0].estimate)]
    budget = f"{gib(limits.gpu_memory)} GiB per GPU"
    if limits.cpu_memory is not None:
        budget += f", {gib(limits.cpu_memory)} GiB host memory per node"
    if limits.nvme is not None:
        budget += f", {gib(limits.nvme)} GiB NVMe per node"
    if result.fits:
        rows = [_row(c.estimate, limits.gpu_memory) for c in result.fits]
        headers = ["stage", "offload opt/param", "checkpointing", "GPU peak", "GPU free"]
        headers += ["CPU/node", "pinned", "NVMe/node", "comm/step"]
        parts.append(f"Fits in {budget}, cheapest first:\n" + format_table(headers, rows))
    else:
        parts.append(f"Nothing fits in {budget}.")
    if result.misses:
        parts.append("Nearest misses:\n" + "\n".join(_miss(c, limits) for c in result.misses[:3]))
    if limits.cpu_memory is None:
        parts.append("note: host memory not checked; pass --cpu-memory to check it")
    return "\n\n".join(parts)


def _row(e: Estimate, gpu_memory: int) -> list[str]:
    peak = e.peak("gpu")[1]
    comm = "3P" if e.zero.stage == 3 else "2P"  # per GPU per step, in param sizes (ZeRO paper)
    host = [gib(e.peak(device)[1]) for device in ("cpu", "pinned", "nvme")]
    return [str(e.zero.stage), e.zero.label(), _checkpointing(e), gib(peak), gib(gpu_memory - peak), *host, comm]


def _miss(candidate: Candidate, limits: Limits) -> str:
    e = candidate.estimate
    shortfalls = []
    for device, over in candidate.over.items():
        need, limit = gib(e.peak(device)[1]), gib(limits.capacity(device) or 0)
        shortfalls.append(f"{_DEVICE_NAMES[device]} needs {need} GiB, {gib(over)} GiB over {limit}")
    checkpointed = f", checkpointing {_checkpointing(e)}" if e.training.checkpointing == "full" else ""
    return f"  stage {e.zero.stage}, offload {e.zero.label()}{checkpointed}: {'; '.join(shortfalls)}{_hint(candidate)}"


def _checkpointing(e: Estimate) -> str:
    t = e.training
    if t.checkpointing != "full":
        return t.checkpointing
    every = "" if t.checkpoint_every == 1 else f"/{t.checkpoint_every}"
    return f"full{every}{' cpu' if t.cpu_checkpointing else ''}"


def _hint(candidate: Candidate) -> str:
    """Point at activations when they alone are more than the overshoot: no ZeRO stage shrinks them."""
    over = candidate.over.get("gpu")
    e = candidate.estimate
    if over is None:
        return ""
    activations = e.by_category("gpu", e.peak("gpu")[0]).get(Category.ACTIVATIONS, 0)
    if activations < over:
        return ""
    fix = "--checkpointing full" if e.training.checkpointing != "full" else "a smaller --micro-batch or --seq-len"
    return f" (activations are {gib(activations)} GiB of it: try {fix})"
