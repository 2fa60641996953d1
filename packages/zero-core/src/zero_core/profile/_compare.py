"""Set the measured phases beside the estimate: totals, errors, and every gap above the threshold, explained.

The allocator is the ruler: where it counted, each phase's error and the peak are taken against the
allocator's peak (over the ledger's locations it counts), and the ledger's categories explain it, with
`untracked` for what they do not. Without an allocator count the ledger's device total stands in.
"""
from __future__ import annotations

from typing import Any

from ._causes import cause
from ._estimator import estimated_categories
from ._phases import PHASES, PhaseMemory

GAP_THRESHOLD = 0.05  # of the measured phase total: smaller differences are left as unexplained remainder


def compare(label: str, device: str, per_rank: list[PhaseMemory], estimate: dict[str, Any],
            allocator: dict[str, Any], absent: dict[str, str]) -> dict[str, Any]:
    """One setting's comparison: per phase the allocator's peak and the measured (rank 0) and estimated
    categories on the device; `allocator` is rank 0's (see _ranks.py: ruler, locations, phases); `absent`: rank
    0's phases that did not happen, with the reason (_phases.py), whose measured figures are None."""
    measured = per_rank[0]
    counted = allocator["phases"] if allocator["ruler"] else {}
    covered = _covered(allocator["locations"], device, {where for phase in measured.values() for where in phase})
    happened = [phase for phase in PHASES if phase not in absent]
    phases: dict[str, Any] = {}
    gaps: list[dict[str, Any]] = []
    for phase in PHASES:
        expected = estimated_categories(estimate, phase)
        predicted_there = sum(sum(estimated_categories(estimate, phase, where).values()) for where in covered)
        if phase in absent:
            phases[phase] = {"measured": None, "estimated": expected, "measured_total": None,
                             "estimated_total": sum(expected.values()), "error": None, "unexplained": None,
                             "allocator": None, "estimated_at_allocator": predicted_there, "allocator_error": None,
                             "absent": absent[phase]}
            continue
        held = {c: b for c, b in measured.get(phase, {}).get(device, {}).items() if c != "total"}
        total, predicted = sum(held.values()), sum(expected.values())
        phase_gaps = _gaps(phase, held, expected, total)
        gaps.extend(phase_gaps)
        explained = sum(gap["difference"] for gap in phase_gaps)
        at_allocator = counted.get(phase)
        phases[phase] = {"measured": held, "estimated": expected, "measured_total": total,
                         "estimated_total": predicted, "error": _error(predicted, total),
                         "unexplained": predicted - total - explained, "allocator": at_allocator,
                         "estimated_at_allocator": predicted_there, "absent": None,
                         "allocator_error": _error(predicted_there, at_allocator["allocator"]) if at_allocator else None}
    # The peak phase: where the ruler was highest (the allocator's, else the ledger's device total), among the
    # phases that happened, on both sides: an estimate's peak at a phase never measured has nothing to be held to.
    ruled = "allocator" if counted else "measured_total"
    estimated_side = "estimated_at_allocator" if counted else "estimated_total"
    measured_peak = max(happened, key=lambda p: _ruler_bytes(phases[p], ruled))
    estimated_peak = max(happened, key=lambda p: phases[p][estimated_side])
    peak_bytes = _ruler_bytes(phases[measured_peak], ruled)
    return {
        "label": label,
        "device": device,
        "ruler": allocator["ruler"] or "the ledger (no allocator count)",
        "phases": phases,
        "peak": {"measured": {"phase": measured_peak, "bytes": peak_bytes},
                 "estimated": {"phase": estimated_peak, "bytes": phases[estimated_peak][estimated_side]},
                 "error": _error(phases[estimated_peak][estimated_side], peak_bytes),
                 "same_phase": measured_peak == estimated_peak},
        "gaps": gaps,
        "ranks": [max((memory.get(p, {}).get(device, {}).get("total", 0) for p in PHASES), default=0)
                  for memory in per_rank],
        "host": {phase: {where: held for where, held in measured.get(phase, {}).items() if where != device}
                 for phase in happened},
    }


def _ruler_bytes(phase: dict[str, Any], ruled: str) -> int:
    if ruled == "allocator":
        return int(phase["allocator"]["allocator"]) if phase["allocator"] else 0
    return int(phase["measured_total"])


def _covered(locations: list[str], device: str, ledger_locations: set[str]) -> list[str]:
    """The estimate's names for the ledger locations the allocator counts: the device is "gpu" there, host lines
    keep their names. Where the engine pinned nothing (the torch pin backend cannot pin without an accelerator,
    so the copies the estimate puts in pinned memory are plain host memory, and the allocator's), the estimate's
    host.pinned lines are counted with host."""
    covered = ["gpu" if where == device else where for where in locations] or ["gpu"]
    if "host" in covered and "host.pinned" not in ledger_locations:
        covered.append("host.pinned")
    return covered


def _gaps(phase: str, held: dict[str, int], expected: dict[str, int], total: int) -> list[dict[str, Any]]:
    out = []
    for category in sorted(set(held) | set(expected)):
        difference = expected.get(category, 0) - held.get(category, 0)
        if total and abs(difference) > GAP_THRESHOLD * total:
            out.append({"phase": phase, "category": category, "measured": held.get(category, 0),
                        "estimated": expected.get(category, 0), "difference": difference,
                        "cause": cause(category, difference > 0, phase)})
    return out


def _error(estimated: int, measured: int) -> float | None:
    """(estimated - measured) / measured; None when nothing was measured."""
    return (estimated - measured) / measured if measured else None
