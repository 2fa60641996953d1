"""Text and JSON of `zero plan --verify`: every configuration tried, the formula beside the trace, the survivors."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from zero_plugins import Category, format_table

from ._estimate import estimate
from ._step_traffic import step_traffic
from ._units import human_size
from ._verify import Budget, Outcome, Verdict


def outcome_dict(outcome: Outcome) -> dict[str, Any]:
    e = outcome.trial.candidate.estimate
    phase, formula_peak = e.peak("gpu")
    return {
        "settings": outcome.trial.label(),
        "lever": outcome.trial.lever,
        "ds_config": outcome.request["ds_config"],
        "request": {k: v for k, v in outcome.request.items() if k != "ds_config"},
        "formula": {"gpu_peak": formula_peak, "gpu_peak_phase": phase, "cpu_peak_per_node": e.peak("cpu")[1],
                    "nvme_per_node": e.peak("nvme")[1], "over": outcome.trial.candidate.over},
        "proxy": step_traffic(e).as_dict(),
        "verdict": outcome.verdict.value,
        "reason": outcome.reason,
        "verified": outcome.measured,
        "stage3": stage3_note(outcome),
        "seconds": outcome.seconds,
        "cached": outcome.cached,
    }


def verify_text(outcomes: list[Outcome], survivors: list[Outcome], budget: Budget, count: int) -> str:
    parts = [f"Verified by the dry run (the engine traced on fake CUDA tensors), budget {human_size(budget.gpu)} per "
             f"GPU ({human_size(budget.limits.gpu_memory)} less {budget.headroom:.0%} headroom):"]
    headers = ["#", "stage", "offload", "ckpt", "mb", "formula GPU", "traced GPU", "traced host/rank", "verdict",
               "time"]
    rows = [_row(i, o) for i, o in enumerate(outcomes, start=1) if o.verdict is not Verdict.NOT_TRIED]
    parts.append(format_table(headers, rows))
    not_tried = sum(o.verdict is Verdict.NOT_TRIED for o in outcomes)
    if not_tried:
        parts.append(f"{not_tried} more planned configuration(s) not traced: {count} had fitted (--verify-count)")
    if survivors:
        lines = [f"Fits, verified ({len(survivors)} of {count} asked for), best first by the throughput proxy "
                 "(nominal step time per token; docs/estimate.md, \"How `zero plan --verify` ranks\"):"]
        for rank, o in enumerate(survivors, start=1):
            lines.append(f"  {rank}. {o.trial.label()}: {o.reason}")
            lines.append(f"     per rank: {_per_rank(o.measured or {})}")
            lines.append(f"     per step and rank: {_proxy(o)}")
        parts.append("\n".join(lines))
    else:
        parts.append("Nothing planned fits by the dry run; the nearest traced misses are above.")
    notes = [f"  {o.trial.label()}: {note}" for o in outcomes if (note := stage3_note(o))]
    if notes:
        parts.append("What made stage 3 fit or not (the traced peak's largest ledger categories, and the weights "
                     "autograd held):\n" + "\n".join(notes))
    parts += [f"refused: {o.trial.label()}: {o.reason}" for o in outcomes if o.verdict is Verdict.REFUSED]
    skipped = [o for o in outcomes if o.verdict is Verdict.SKIPPED]
    if skipped:  # one reason for all: NVMe offload
        parts.append(f"{len(skipped)} configuration(s) not verifiable ({skipped[0].reason})")
    return "\n\n".join(parts)


def stage3_note(outcome: Outcome) -> str | None:
    """At stage 3: the traced peak's largest categories, the held weights (autograd's saved gathered weights) and
    memory_efficient_linear, with the formula's peak and held weights had it been the other way."""
    e = outcome.trial.candidate.estimate
    if e.zero.stage != 3 or outcome.measured is None:
        return None
    measured = outcome.measured
    categories: Mapping[str, int] = measured["categories"]
    largest = sorted(categories.items(), key=lambda item: (-item[1], item[0]))[:4]  # ties by name: as cached
    shown = ", ".join(f"{name} {human_size(size)}" for name, size in largest)
    linear = "on (autograd keeps no gathered weight)" if e.zero.memory_efficient_linear else \
        "off (autograd keeps each gathered weight for backward)"
    note = (f"{outcome.verdict.value} with peak {human_size(int(measured['gpu_peak']))} in "
            f"{measured['gpu_peak_phase']}: {shown}; held weights ({Category.PARAM_GATHERED_HELD.value}) "
            f"{human_size(_held(categories))} with memory_efficient_linear {linear}")
    if e.training.checkpointing == "full":
        # The estimator holds every layer's saved weights even where checkpointing frees them layer by layer, so
        # its figure with memory_efficient_linear off would mislead here.
        return note
    flipped = estimate(e.model, e.cluster, e.training,
                       replace(e.zero, memory_efficient_linear=not e.zero.memory_efficient_linear))
    phase, peak = flipped.peak("gpu")
    other = f"{human_size(peak)} ({phase}), held weights {human_size(_held(flipped.by_category('gpu', phase)))}"
    return f"{note}; with it {'off' if e.zero.memory_efficient_linear else 'on'} the formula puts the peak at {other}"


def _held(categories: Mapping[str, int]) -> int:
    return int(categories.get(Category.PARAM_GATHERED_HELD.value, 0))


def _row(index: int, o: Outcome) -> list[str]:
    e = o.trial.candidate.estimate
    traced = o.measured or {}
    time_taken = "cached" if o.cached else ("-" if o.verdict is Verdict.SKIPPED else f"{o.seconds:.0f} s")
    return [str(index), str(e.zero.stage), e.zero.label(), e.training.checkpointing, str(e.training.micro_batch),
            human_size(e.peak("gpu")[1]), human_size(int(traced["gpu_peak"])) if traced else "-",
            human_size(int(traced["host_peak"])) if traced else "-", o.verdict.value, time_taken]


def _proxy(o: Outcome) -> str:
    t = step_traffic(o.trial.candidate.estimate)
    return (f"{t.tokens:,} tokens, gather {human_size(t.gathered_bytes)} + reduce {human_size(t.reduced_bytes)}, "
            f"host<->device {human_size(t.host_to_device_bytes + t.device_to_host_bytes)}, "
            f"NVMe {human_size(t.nvme_read_bytes + t.nvme_write_bytes)}, "
            f"recompute {t.recompute_flops / 1e12:,.1f} TFLOP; "
            f"transfer-bound {t.transfer_bound:.0%}")


def _per_rank(measured: Mapping[str, Any]) -> str:
    ranks: Mapping[str, int] = measured.get("ranks", {})
    return ", ".join(f"rank {rank} {human_size(size)}" for rank, size in ranks.items())
