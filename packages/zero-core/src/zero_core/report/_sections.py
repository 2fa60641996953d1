"""Sections that plugins add to `zero report` through the `zero_register_report_sections` hook.

zero-core cannot import the packages above it (zero-offload), so they contribute their part
of the report through this hook instead.
"""
from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from zero_plugins import PluginError, Provenance, format_table, plain_hookimpls, plugin_infos, use_hookspecs

from . import _hookspecs
from ._table import ReportTable

HOOK = "zero_register_report_sections"

#: A section's build(), as handed to `register(key, title, build)`.
BuildSection = Callable[[], ReportTable]


@dataclass(frozen=True)
class Section:
    """One built plugin section: its key and data for --json, its heading and table for the text."""

    key: str
    title: str
    text: str
    data: object


def plugin_sections(taken: Collection[str]) -> list[Section]:
    """Every plugin's sections, sorted by key; `taken` are the report's own keys, which plugins may not use.

    A hook or a build() that raises becomes a section holding one line that names the plugin and
    the error, so one broken plugin neither breaks the report nor disappears from it silently.
    """
    manager = use_hookspecs(_hookspecs)
    labels = {info.name: Provenance(info.name, info.distribution, info.version).label() for info in plugin_infos()
              if info.enabled}  # not one refused under a loaded plugin's name
    registered: dict[str, tuple[str, str, BuildSection]] = {}  # key -> (title, plugin label, build)
    sections: list[Section] = []
    for impl in plain_hookimpls(manager, HOOK):
        label = labels[impl.plugin_name]
        try:
            impl.function(register=_register_into(registered, taken, label))
        except Exception as error:  # sections it registered before failing are still built below
            sections.append(_failed(f"plugin:{impl.plugin_name}", f"report sections of {label}",
                                    f"{label} raised {error!r} in {HOOK}"))
    for key, (title, label, build) in registered.items():
        sections.append(_build(key, title, label, build))
    return sorted(sections, key=lambda section: section.key)


def _register_into(registered: dict[str, tuple[str, str, BuildSection]], taken: Collection[str],
                   label: str) -> Callable[[str, str, BuildSection], None]:
    def register(key: str, title: str, build: BuildSection) -> None:
        # Keys are identifiers, so they never collide with the "plugin:NAME" keys of failed hooks.
        if not key.isidentifier():
            raise PluginError(f"{label} registered report section {key!r}: the key must be an identifier")
        if key in taken or key in registered:
            owner = registered[key][1] if key in registered else "zero report itself"
            raise PluginError(f"report section {key!r} is registered twice: by {owner} and by {label}")
        registered[key] = (title, label, build)

    return register


def _build(key: str, title: str, label: str, build: BuildSection) -> Section:
    try:
        table = build()
        return Section(key, title, format_table(table.headers, table.rows), table.data)
    except Exception as error:  # rendering is inside the try: a malformed table is the plugin's error too
        return _failed(key, title, f"{label} could not build this section: {error!r}")


def _failed(key: str, title: str, message: str) -> Section:
    return Section(key, title, message, {"error": message})
