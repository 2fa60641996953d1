"""`zero profile`'s plain-text report: per setting, the phases measured beside the estimate, and the gaps."""
from __future__ import annotations

from typing import Any

from zero_plugins import Category, format_table

from ._phases import PHASES

MiB = 1024 * 1024


def profile_text(report: dict[str, Any]) -> str:
    model = report["model"]
    lora = f", LoRA rank {model['lora_rank']}" if model["lora_rank"] else ""
    parts = [f"zero profile: {model['name']}{lora}, {report['precision']}, {report['nproc']} ranks, micro-batch "
             f"{report['micro_batch']} x {report['seq_len']} tokens, {report['attention']} attention, {report['steps']} steps; rank 0's memory in MiB. "
             "It leads with the allocator's peak per phase (the ruler: what torch's allocator counts), then the "
             "ledger's part of it (tracking on), `untracked` = allocator - ledger, and zero-estimate's figure; "
             "errors are the estimate's against the allocator"]
    parts += [f"note: {note}" for note in report["notes"]]
    dry = report.get("dry_run")
    if dry is not None:
        ranks = " and ".join(str(rank) for rank in dry["traced_ranks"])
        parts.append(f"dry run: rank{'s' if len(dry['traced_ranks']) > 1 else ''} {ranks} of {report['nproc']} traced "
                     f"on fake {dry['device']} tensors ({_mib(dry['device_memory'])} MiB per device), nothing "
                     "allocated; modelled, not traced:")
        parts += [f"  {what}" for what in dry["modelled"]]
    for setting in report["settings"]:
        parts += ["", _setting_text(setting, report["gap_threshold"])]
        if dry is not None:
            parts.append(_fits(setting, dry["device_memory"]))
    if len(report["settings"]) > 1:
        parts += ["", _summary(report["settings"])]
    return "\n".join(parts)


def _setting_text(setting: dict[str, Any], threshold: float) -> str:
    phases = setting["phases"]
    peak = setting["peak"]
    lines = [f"{setting['label']} (device: {setting['device']}; ruler: {setting['ruler']}; optimizer step: "
             f"{setting['optimizer_kernel']})",
             f"attention: {setting['attention']['requested']}, measured on {'; '.join(setting['attention']['kernels'])}",
             f"placement: {setting['placement_summary']}",
             _phase_table(phases)]
    lines += [f"{phase}: not measured: {phases[phase]['absent']}" for phase in PHASES if phases[phase]["absent"]]
    lines += [f"peak: measured {_mib(peak['measured']['bytes'])} at {peak['measured']['phase']}, estimated "
             f"{_mib(peak['estimated']['bytes'])} at {peak['estimated']['phase']} ({_percent(peak['error'])}"
             + ("" if peak["same_phase"] else ", a different phase") + ")"]
    at = peak["measured"]["phase"]
    held, expected = phases[at]["measured"], phases[at]["estimated"]
    rows = [(category, _mib(held.get(category, 0)), _mib(expected.get(category, 0)))
            for category in sorted(set(held) | set(expected), key=lambda c: -max(held.get(c, 0), expected.get(c, 0)))
            if held.get(category) or expected.get(category)]
    lines += [f"at the measured peak ({at}), by category:", format_table(["category", "measured", "estimated"], rows)]
    reserved = setting["allocator"]["max_reserved"]
    if reserved is not None and reserved > (1 + threshold) * peak["measured"]["bytes"]:
        cached = reserved - peak["measured"]["bytes"]
        lines.append(f"allocator caching: the device allocator reserved {_mib(cached)} MiB beyond its allocated peak "
                     f"of {_mib(peak['measured']['bytes'])} MiB (torch's max_memory_reserved); not in the ledger "
                     "nor the estimate. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lowers it")
    gaps = setting["gaps"]
    if gaps:
        lines.append(f"gaps above {threshold:.0%} of a phase's measured total:")
        lines += [f"  {gap['phase']}, {gap['category']}: {'+' if gap['difference'] > 0 else '-'}"
                  f"{_mib(abs(gap['difference']))} MiB estimated ({gap['cause']})" for gap in gaps]
    else:
        lines.append(f"no gap above {threshold:.0%} of a phase's measured total")
    return "\n".join(lines)


def _phase_table(phases: dict[str, Any]) -> str:
    # A phase that did not happen shows "-" where a measurement would be, and its estimate alone.
    if all(phases[phase]["allocator"] is None for phase in PHASES):  # nothing counted: the ledger leads
        rows: list[tuple[str, ...]] = [(phase, _mib(phases[phase]["measured_total"]),
                                        _mib(phases[phase]["estimated_total"]), _percent(phases[phase]["error"]))
                                       for phase in PHASES]
        return format_table(["phase", "ledger", "estimated", "error"], rows)
    rows = []
    for phase in PHASES:
        counted = phases[phase]["allocator"] or {"allocator": None, "ledger": None, "untracked": None}
        rows.append((phase, _mib(counted["allocator"]), _mib(counted["ledger"]), _mib(counted["untracked"]),
                     _percent(counted["untracked"] / counted["allocator"] if counted["allocator"] else None),
                     _mib(phases[phase]["estimated_at_allocator"]), _percent(phases[phase]["allocator_error"])))
    return format_table(["phase", "allocator", "ledger", "untracked", "of allocator", "estimated", "error"], rows)


def _summary(settings: list[dict[str, Any]]) -> str:
    rows = []
    for setting in settings:
        init, peak = setting["phases"]["init"], setting["peak"]
        rows.append((setting["label"], _mib(init["measured_total"]), _mib(peak["measured"]["bytes"]),
                     peak["measured"]["phase"], _mib(peak["estimated"]["bytes"]), _mib(_held_at_peak(setting))))
    lines = ["summary (MiB)", format_table(["setting", "after init", "peak (ruler)", "at", "estimated peak",
                                            "held weights at peak"], rows)]
    below = [setting for setting in settings if setting["setting"]["stage"] < 3]
    if below:
        base = below[-1]
        for setting in settings:
            if setting["setting"]["stage"] == 3:
                lines.append(_against(setting, base))
    return "\n".join(lines)


def _fits(setting: dict[str, Any], device_memory: int) -> str:
    """A dry run's answer to "will it fit": the peak against the device's memory (the allocator's reserve and
    what the CUDA context takes come on top)."""
    peak = setting["peak"]["measured"]["bytes"]
    if peak <= device_memory:
        return (f"fits: the peak is {_mib(peak)} MiB of the device's {_mib(device_memory)} MiB "
                f"({peak / device_memory:.0%}; the allocator's reserve and the CUDA context come on top)")
    return (f"does not fit: the peak is {_mib(peak - device_memory)} MiB above the device's {_mib(device_memory)} MiB "
            f"({peak / device_memory:.0%} of it)")


def _held_at_peak(setting: dict[str, Any]) -> int:
    """Gathered weights stage 3 still held at the measured peak (param.gathered.held)."""
    at = setting["peak"]["measured"]["phase"]
    return int(setting["phases"][at]["measured"].get(Category.PARAM_GATHERED_HELD, 0))


def _against(setting: dict[str, Any], base: dict[str, Any]) -> str:
    """One line: where this stage-3 setting's peak lies against the lower stage's, and the held weights' part."""
    difference = setting["peak"]["measured"]["bytes"] - base["peak"]["measured"]["bytes"]
    held = _held_at_peak(setting)
    side = "above" if difference > 0 else "below"
    why = (f"; it holds {held} bytes ({_mib(held)} MiB) of gathered weights (param.gathered.held) at its peak: "
           "autograd keeps each gathered weight a linear layer saved for backward; memory_efficient_linear true "
           "saves the partition instead") if held else "; no gathered weight is held at its peak"
    return f"{setting['label']}: peak {_mib(abs(difference))} MiB {side} {base['label']}'s{why}"


def _mib(nbytes: int | None) -> str:
    return "-" if nbytes is None else f"{nbytes / MiB:.2f}"


def _percent(error: float | None) -> str:
    return "n/a" if error is None else f"{error:+.1%}"
