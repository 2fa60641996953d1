"""`zero profile --html FILE`: one self-contained page (inline SVG, no scripts, nothing fetched).

For each setting a stacked bar per phase, the ledger's categories (M) beside the estimate's (E), one colour
per category, and a black line across both at the allocator's peak (the ruler), so the peak, what makes it
and what the ledger does not explain show at a glance. Every setting shares one vertical scale, so stage 2
and stage 3 compare by eye. The text report follows below.
"""
from __future__ import annotations

import html
from typing import Any

from ._phases import PHASES
from ._text import profile_text

MiB = 1024 * 1024
_PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
            "#9c755f", "#bab0ac", "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e")
_BAR, _GAP, _HEIGHT, _LEFT = 34, 26, 260, 70


def profile_html(report: dict[str, Any]) -> str:
    categories = sorted({category for setting in report["settings"] for phase in setting["phases"].values()
                         for side in ("measured", "estimated") for category in phase[side] or {}})
    colours = {category: _PALETTE[i % len(_PALETTE)] for i, category in enumerate(categories)}
    legend = "".join(f'<span class="key"><i style="background:{colours[c]}"></i>{html.escape(c)}</span>'
                     for c in categories)
    top = max(_chart_top(setting) for setting in report["settings"]) or 1  # one scale for every setting
    charts = "".join(_chart(setting, colours, top) for setting in report["settings"])
    title = html.escape(f"zero profile: {report['model']['name']}")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{_STYLE}</style></head><body><h1>{title}</h1>"
            f'<p>Rank 0\'s memory per phase, MiB, one scale for every setting: M = the engine\'s ledger by '
            f'category, E = zero-estimate\'s, and the black line = the allocator\'s peak (the ruler; the gap '
            f'between it and M is untracked).</p><div class="legend">{legend}</div>{charts}'
            f"<h2>Report</h2><pre>{html.escape(profile_text(report))}</pre></body></html>\n")


def _chart_top(setting: dict[str, Any]) -> int:
    return max(max(int(p["measured_total"] or 0), int(p["estimated_total"]), int(p["estimated_at_allocator"]),
                   int(p["allocator"]["allocator"]) if p["allocator"] else 0) for p in setting["phases"].values())


def _chart(setting: dict[str, Any], colours: dict[str, str], top: int) -> str:
    phases = setting["phases"]
    width = _LEFT + len(PHASES) * (2 * _BAR + _GAP) + 10
    shapes = [f'<text x="{_LEFT - 6}" y="14" class="axis" text-anchor="end">{top / MiB:.1f}</text>',
              f'<text x="{_LEFT - 6}" y="{_HEIGHT + 10}" class="axis" text-anchor="end">0</text>']
    for index, phase in enumerate(PHASES):
        x = _LEFT + index * (2 * _BAR + _GAP)
        for offset, side, mark in ((0, "measured", "M"), (_BAR, "estimated", "E")):
            if phases[phase][side] is None:  # a phase that did not happen: no bar, the reason on hover
                shapes.append(f'<text x="{x + offset + _BAR / 2 - 2}" y="{_HEIGHT + 6}" class="axis" '
                              f'text-anchor="middle"><title>{html.escape(phases[phase]["absent"])}</title>-</text>')
            else:
                shapes += _stack(x + offset, phases[phase][side], top, colours, f"{phase}, {side}")
            shapes.append(f'<text x="{x + offset + _BAR / 2 - 2}" y="{_HEIGHT + 24}" class="axis" '
                          f'text-anchor="middle">{mark}</text>')
        shapes.append(f'<text x="{x + _BAR}" y="{_HEIGHT + 42}" text-anchor="middle">{phase}</text>')
        counted = phases[phase]["allocator"]
        if counted:
            y = _HEIGHT + 10 - _HEIGHT * counted["allocator"] / top
            label = html.escape(f"{phase}: allocator peak {counted['allocator'] / MiB:.2f} MiB, untracked "
                                f"{counted['untracked'] / MiB:.2f} MiB")
            shapes.append(f'<line x1="{x - 2}" x2="{x + 2 * _BAR - 2}" y1="{y:.1f}" y2="{y:.1f}" stroke="#000" '
                          f'stroke-width="2"><title>{label}</title></line>')
    peak = setting["peak"]["measured"]
    absent = "".join(f"; {html.escape(phase)} not measured: {html.escape(phases[phase]['absent'])}"
                     for phase in PHASES if phases[phase]["absent"])
    return (f"<h2>{html.escape(setting['label'])}</h2><p>measured peak {peak['bytes'] / MiB:.2f} MiB at "
            f"{html.escape(peak['phase'])}; optimizer step: {html.escape(setting['optimizer_kernel'])}{absent}</p>"
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{_HEIGHT + 50}" role="img">'
            + "".join(shapes) + "</svg>")


def _stack(x: float, held: dict[str, int], top: int, colours: dict[str, str], what: str) -> list[str]:
    shapes, y = [], float(_HEIGHT + 10)
    for category in sorted(held, key=lambda c: -held[c]):
        height = _HEIGHT * held[category] / top
        y -= height
        label = html.escape(f"{what}: {category} {held[category] / MiB:.2f} MiB")
        shapes.append(f'<rect x="{x}" y="{y:.1f}" width="{_BAR - 4}" height="{height:.1f}" '
                      f'fill="{colours[category]}"><title>{label}</title></rect>')
    return shapes


_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:70em}svg{display:block;margin:0.5em 0 1.5em}"
          ".axis{font-size:11px;fill:#555}.legend{margin:1em 0}.key{margin-right:1.2em;white-space:nowrap}"
          ".key i{display:inline-block;width:0.9em;height:0.9em;margin-right:0.3em;vertical-align:middle}"
          "pre{background:#f6f6f6;padding:1em;overflow-x:auto}")
