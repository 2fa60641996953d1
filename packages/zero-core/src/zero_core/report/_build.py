"""Assemble `zero report` as JSON data and as plain text."""
from __future__ import annotations

from typing import Any

from zero_plugins import CommandResult, Status, format_table, installed_zero_distributions

from . import _collect
from ._sections import Section, plugin_sections


def build_report() -> CommandResult:
    data = {
        "python": _collect.python_facts(),
        "torch": _collect.torch_facts(),
        "zero": installed_zero_distributions(),
        "accelerator": _collect.accelerator_facts(),
        "pinning": _collect.pin_facts(),
        "build_tools": _collect.build_tool_facts(),
        "plugins": _collect.plugin_facts(),
    }
    extra = plugin_sections(taken=data.keys())
    data.update((section.key, section.data) for section in extra)
    return CommandResult(data, render(data, extra))


def _bytes_or_unlimited(value: int | None) -> str:
    return "unlimited" if value is None else f"{value / 2**20:.1f} MiB ({value} bytes)"


def render(data: dict[str, Any], extra: list[Section]) -> str:
    """The text report: zero-core's own tables, then the plugins' sections (`extra`), then the plugin list."""
    accel = data["accelerator"]
    pin = data["pinning"]
    tools = data["build_tools"]
    general = [
        ("python", f"{data['python']['version']} ({data['python']['executable']})"),
        ("torch", f"{data['torch']['version']} ({data['torch']['path']})"),
        ("torch cuda", data["torch"]["cuda"] or "none"),
        *((name, version) for name, version in data["zero"].items()),
        ("accelerator", f"{accel['selected']} ({accel['reason']})"),
        ("memory figures", accel["memory_stats_source"]),
        ("memlock limit", f"soft {_bytes_or_unlimited(pin['memlock_limit']['soft'])}, "
         f"hard {_bytes_or_unlimited(pin['memlock_limit']['hard'])}"),
        ("native pin op", f"{pin['native_op']['state']} ({pin['native_op']['detail']})"),
        ("ninja", tools["ninja"] or "not found"),
        ("C++ compiler", tools["cxx_compiler"] or "not found"),
        ("Python headers", tools["python_headers"] or "not found (install python3-dev)"),
    ]
    sections = [
        "zero report",
        format_table(["item", "value"], general),
        "accelerators",
        _status_table(accel["accelerators"]),
        "pin backends (DS_PIN_MEMORY_BACKEND)",
        _status_table(pin["backends"]),
        *(part for section in extra for part in (section.title, section.text)),
        "plugins",
        format_table(
            ["plugin", "distribution", "hooks"],
            [(p["name"], f"{p['distribution']} {p['version']}".strip(), ", ".join(p["hooks"])) for p in data["plugins"]],
        ),
    ]
    return "\n\n".join(sections)


def _status_table(rows: list[Status]) -> str:
    return format_table(
        ["name", "available", "selected", "reason", "distribution"],
        [(r["name"], "yes" if r["available"] else "no", "*" if r["selected"] else "", r["reason"], r["distribution"])
         for r in rows],
    )
