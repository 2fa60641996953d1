"""Set the measured phases beside the estimate: totals, errors, and every gap above the threshold, explained."""
from __future__ import annotations

from typing import Any

from ._causes import cause
from ._estimator import estimated_categories
from ._phases import PHASES, PhaseMemory

GAP_THRESHOLD = 0.05  # of the measured phase total: smaller differences are left as unexplained remainder


def compare(label: str, device: str, per_rank: list[PhaseMemory], estimate: dict[str, Any]) -> dict[str, Any]:
    """One setting's comparison: per phase the measured (rank 0) and estimated categories on the device."""
    measured = per_rank[0]
    phases: dict[str, Any] = {}
    gaps: list[dict[str, Any]] = []
    for phase in PHASES:
        held = {c: b for c, b in measured.get(phase, {}).get(device, {}).items() if c != "total"}
        expected = estimated_categories(estimate, phase)
        total, predicted = sum(held.values()), sum(expected.values())
        phase_gaps = _gaps(phase, held, expected, total)
        gaps.extend(phase_gaps)
        explained = sum(gap["difference"] for gap in phase_gaps)
        phases[phase] = {"measured": held, "estimated": expected, "measured_total": total,
                         "estimated_total": predicted, "error": _error(predicted, total),
                         "unexplained": predicted - total - explained}
    measured_peak = max(PHASES, key=lambda p: phases[p]["measured_total"])
    estimated_peak = max(PHASES, key=lambda p: phases[p]["estimated_total"])
    return {
        "label": label,
        "device": device,
        "phases": phases,
        "peak": {"measured": {"phase": measured_peak, "bytes": phases[measured_peak]["measured_total"]},
                 "estimated": {"phase": estimated_peak, "bytes": phases[estimated_peak]["estimated_total"]},
                 "error": _error(phases[estimated_peak]["estimated_total"], phases[measured_peak]["measured_total"]),
                 "same_phase": measured_peak == estimated_peak},
        "gaps": gaps,
        "ranks": [max((memory.get(p, {}).get(device, {}).get("total", 0) for p in PHASES), default=0)
                  for memory in per_rank],
        "host": {phase: {where: held for where, held in measured.get(phase, {}).items() if where != device}
                 for phase in PHASES},
    }


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
