"""`zero plan --verify`: the planned configurations traced by the real engine on fake tensors until K fit.

zero-estimate cannot import zero-core (nor torch): it declares the hook `zero_verify_candidate`
(_verify_hookspecs.py) and zero-core implements it with its dry run. Each configuration is traced once per
model, request and version (_verify_cache.py); the fit is judged here, against the budget: the GPU's memory less
the headroom, and host memory per node.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from zero_plugins import PluginHook, ZeroError, plugin_hooks, use_hookspecs

from . import _verify_hookspecs
from ._errors import EstimateError
from ._plan import Limits
from ._units import human_size
from ._verify_cache import VerifyCache
from ._verify_search import Trial

HOOK = "zero_verify_candidate"


class Verdict(str, Enum):
    FITS = "fits"
    OVER = "does not fit"
    REFUSED = "refused"  # the engine refused the configuration (the reason is its message)
    SKIPPED = "not verifiable"  # the dry run cannot trace it (NVMe offload)
    NOT_TRIED = "not tried"  # K had fitted before its turn


@dataclass(frozen=True)
class Outcome:
    trial: Trial
    request: dict[str, Any]
    verdict: Verdict
    reason: str
    measured: dict[str, Any] | None  # the dry run's answer (see the hookspec); None when not traced
    seconds: float  # this search's time on it: 0 when kept from an earlier search
    cached: bool

    @property
    def fits(self) -> bool:
        return self.verdict is Verdict.FITS


@dataclass(frozen=True)
class Budget:
    """The limits as given, the fraction of each GPU kept free (headroom), and what is left to fit in."""

    limits: Limits
    headroom: float

    @property
    def gpu(self) -> int:
        return int(self.limits.gpu_memory * (1 - self.headroom))


def dry_run_hook() -> PluginHook:
    """The installed dry run (zero-core's); without it --verify is refused before anything is planned."""
    hooks = plugin_hooks(use_hookspecs(_verify_hookspecs), HOOK)
    if not hooks:
        raise EstimateError("needs zero-core, whose dry run traces each configuration (it implements the "
                            f"{HOOK} hook); install it: pip install zero-core (or pip install -e packages/zero-core)",
                            "verify")
    return hooks[0]


def search(trials: list[Trial], requests: list[dict[str, Any]], keys: list[str], budget: Budget, count: int,
           gpus_per_node: int, cache: VerifyCache, hook: PluginHook) -> list[Outcome]:
    """Trace the trials in order until `count` fit; every trial gets an outcome (see Verdict)."""
    say = _progress()
    traceable = sum(1 for t in trials if _untraceable(t) is None)
    outcomes: list[Outcome] = []
    fitted, index = 0, 0
    for trial, request, key in zip(trials, requests, keys):
        if fitted >= count:
            outcomes.append(Outcome(trial, request, Verdict.NOT_TRIED, f"{count} had fitted", None, 0.0, False))
            continue
        why_not = _untraceable(trial)
        if why_not is not None:
            outcomes.append(Outcome(trial, request, Verdict.SKIPPED, why_not, None, 0.0, False))
            continue
        index += 1
        outcome = _verify(trial, request, key, budget, gpus_per_node, cache, hook,
                          lambda message: say(f"candidate {index} of {traceable}: {message}"))
        fitted += outcome.fits
        outcomes.append(outcome)
    return outcomes


def _verify(trial: Trial, request: dict[str, Any], key: str, budget: Budget, gpus_per_node: int,
            cache: VerifyCache, hook: PluginHook, say: Callable[[str], None]) -> Outcome:
    measured = cache.get(key)
    if measured is not None:
        verdict, reason = judge(measured, budget, gpus_per_node)
        say(f"{trial.label()}: cached: {verdict.value}: {reason}")
        return Outcome(trial, request, verdict, reason, measured, 0.0, True)
    say(f"{trial.label()}: tracing")
    started = time.monotonic()
    try:
        answer = hook(request=request)
    except ZeroError as error:  # a refusal of this configuration, which says why; the search goes on
        seconds = time.monotonic() - started
        say(f"refused: {error}")
        return Outcome(trial, request, Verdict.REFUSED, str(error), None, round(seconds, 1), False)
    seconds = time.monotonic() - started
    if not isinstance(answer, dict):
        raise EstimateError(f"the {HOOK} hook of {hook.plugin.label()} answered {answer!r}, not a measurement; "
                            f"{hook.plugin.remedy()}", "verify")
    cache.put(key, answer)
    verdict, reason = judge(answer, budget, gpus_per_node)
    say(f"{verdict.value}: {reason}")
    return Outcome(trial, request, verdict, reason, answer, round(seconds, 1), False)


def judge(measured: Mapping[str, Any], budget: Budget, gpus_per_node: int) -> tuple[Verdict, str]:
    """Fits, or not and by how much: the traced GPU peak against the budget, host memory per node against its limit."""
    peak = int(measured["gpu_peak"])
    shown = f"{human_size(budget.limits.gpu_memory)} less {budget.headroom:.0%} headroom = {human_size(budget.gpu)}"
    traced = f"GPU peak {human_size(peak)} ({measured['gpu_peak_phase']})"
    problems = []
    if peak > budget.gpu:
        problems.append(f"{traced} is {human_size(peak - budget.gpu)} over {shown}")
    host, host_limit = int(measured["host_peak"]) * gpus_per_node, budget.limits.cpu_memory
    if host_limit is not None and host > host_limit:
        problems.append(f"host memory {human_size(host)} per node is {human_size(host - host_limit)} over "
                        f"{human_size(host_limit)}")
    if problems:
        return Verdict.OVER, "; ".join(problems)
    return Verdict.FITS, f"{traced}, {human_size(budget.gpu - peak)} under {shown}"


def _untraceable(trial: Trial) -> str | None:
    zero = trial.candidate.estimate.zero
    if "nvme" in (zero.offload_optimizer, zero.offload_param):
        return "NVMe offload: a dry run cannot write swap files from fake tensors; the formula's figures only"
    return None


def _progress() -> Callable[[str], None]:
    started = time.monotonic()

    def say(message: str) -> None:  # stderr: --json keeps stdout to itself
        print(f"zero plan --verify: {message} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)

    return say
