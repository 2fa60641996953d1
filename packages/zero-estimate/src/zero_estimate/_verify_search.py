"""The configurations `zero plan --verify` traces: finite, and in the order they are tried.

The planner's ladder (stage x offload, cheapest first, checkpointing as its lever) is run once per lever set,
each set adding one lever to the one before:

1. as given;
2. memory_efficient_linear on (stage 3: autograd keeps no gathered weight; costs nothing), if it was off;
3. SDPA for eager attention (keeps a logsumexp, not the s x s probabilities; faster, too), if eager was given;
4. smaller buckets and max-live (SMALL_BUFFERS: more, smaller collectives), where the given ones are larger;
5. the micro-batch halved, down to 1, gradient accumulation raised to keep the batch (fewer tokens per pass).

From each set come the configurations the formula fits in the budget, then its near misses (over by at most
NEAR_MISS: the estimator is a few percent off in places, docs/estimate.md), each configuration once. They are
tried in tiers of what the levers cost a step, each tier in the order above: first sets 1-4 as the planner gives
them without checkpointing (levers that cost next to nothing), then sets 1-4 with the checkpointing the planner
added (one more forward per step), then the smaller micro-batches.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ._plan import Candidate, Limits, plan
from ._settings import Cluster, Training, ZeroSettings
from ._spec import ModelSpec

NEAR_MISS = 0.15
# A tenth of DeepSpeed's defaults (5e8, 5e8, 5e7, 1e9 elements): the largest collective buffer then holds
# 50M elements, 100 MB in 16-bit, against the gigabytes of a 7B model's states.
SMALL_BUFFERS = {
    "reduce_bucket_size": 50_000_000,
    "allgather_bucket_size": 50_000_000,
    "stage3_prefetch_bucket_size": 5_000_000,
    "stage3_max_live_parameters": 100_000_000,
}


@dataclass(frozen=True)
class Lever:
    """A lever set: the training loop and ZeRO settings the ladder is run with, and what it changed."""

    name: str
    training: Training
    zero: ZeroSettings
    free: bool = True  # costs a step next to nothing (all but a smaller micro-batch)


@dataclass(frozen=True)
class Trial:
    """One configuration to trace: the lever set it came from and the formula's verdict on it."""

    lever: str
    candidate: Candidate

    def label(self) -> str:
        e = self.candidate.estimate
        parts = [f"stage {e.zero.stage}", f"offload {e.zero.label()}", f"checkpointing {e.training.checkpointing}",
                 f"micro-batch {e.training.micro_batch}", f"attention {e.training.attention}"]
        if e.zero.stage == 3:
            parts.append(f"memory_efficient_linear {str(e.zero.memory_efficient_linear).lower()}")
        if self.lever != "as given":
            parts.append(f"lever: {self.lever}")
        return ", ".join(parts)


def levers(training: Training, zero: ZeroSettings) -> list[Lever]:
    """The lever sets, each the one before with one more lever pulled (see the module's docstring)."""
    sets = [Lever("as given", training, zero)]
    if not zero.memory_efficient_linear:
        zero = replace(zero, memory_efficient_linear=True)
        sets.append(Lever("memory_efficient_linear", training, zero))
    if training.attention == "eager":
        training = replace(training, attention="sdpa")
        sets.append(Lever("sdpa attention", training, zero))
    smaller: dict[str, Any] = {key: value for key, value in SMALL_BUFFERS.items() if getattr(zero, key) > value}
    if smaller:
        zero = replace(zero, **smaller)
        sets.append(Lever("smaller buckets", training, zero))
    batch = training.micro_batch * training.grad_accum
    while training.micro_batch > 1:
        micro = training.micro_batch // 2
        training = replace(training, micro_batch=micro, grad_accum=-(-batch // micro))
        sets.append(Lever(f"micro-batch {micro}", training, zero, free=False))
    return sets


def trials(model: ModelSpec, cluster: Cluster, limits: Limits, training: Training, zero: ZeroSettings,
           identity: Callable[[Candidate], str]) -> list[Trial]:
    """Every lever set's fits, then near misses, each configuration once (`identity`: what makes two the same),
    in the tiers of the module's docstring."""
    found: list[tuple[int, Trial]] = []
    seen: set[str] = set()
    for lever in levers(training, zero):
        result = plan(model, cluster, limits, lever.training, lever.zero)
        near = [c for c in result.misses if c.shortfall(limits) <= NEAR_MISS]
        for candidate in result.fits + near:
            key = identity(candidate)
            if key in seen:
                continue
            seen.add(key)
            added = candidate.estimate.training.checkpointing != lever.training.checkpointing
            name = lever.name if not added else "checkpointing" if lever.name == "as given" else \
                f"{lever.name}, checkpointing"
            found.append((0 if lever.free and not added else 1 if lever.free else 2, Trial(name, candidate)))
    return [trial for _, trial in sorted(found, key=lambda item: item[0])]  # stable: each tier in its order
