"""Sections that plugins add to `zero report` through the `zero_register_report_sections` hook.

zero-core builds the report but cannot import the packages above it (zero-offload), so they
add their part through this hook; a plugin whose section fails shows the failure in place.
"""
from __future__ import annotations

import json
from typing import Any

import pluggy
import pytest
from zero_plugins import hookimpl

from cli_helpers import run_main
from zero_core.report import ReportTable

pytest.importorskip("zero_cli")


class DisksPlugin:
    @hookimpl
    def zero_register_report_sections(self, register: Any) -> None:
        register("disks", "disks (FAKE_DISKS)", lambda: ReportTable(
            ["disk", "free"], [("nvme0", "1 TiB"), ("nvme1", "2 TiB")], {"disks": ["nvme0", "nvme1"]}))


class BrokenSectionPlugin:
    @hookimpl
    def zero_register_report_sections(self, register: Any) -> None:
        register("broken", "broken section", self.build)

    def build(self) -> ReportTable:
        raise RuntimeError("no facts today")


class BrokenHookPlugin:
    @hookimpl
    def zero_register_report_sections(self, register: Any) -> None:
        register("torch", "my torch", lambda: ReportTable([], [], None))  # zero-core's own key


def _report(capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    code, out, err = run_main(capsys, "report", "--json")
    assert code == 0, err
    data = json.loads(out)  # stdout holds the JSON alone
    code, text, err = run_main(capsys, "report")
    assert code == 0, err
    return data, text


def test_a_plugin_section_is_in_the_json_and_the_text(plugin_manager: pluggy.PluginManager,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    plugin_manager.register(DisksPlugin(), name="disks")
    data, text = _report(capsys)
    assert data["disks"] == {"disks": ["nvme0", "nvme1"]}
    assert "\n\ndisks (FAKE_DISKS)\n\ndisk   free\n-----  -----\nnvme0  1 TiB\nnvme1  2 TiB\n\n" in text
    assert text.index("\n\ndisks (FAKE_DISKS)\n") < text.index("\n\nplugins\n")  # before the plugin list


def test_a_section_that_raises_shows_the_plugin_and_the_error(plugin_manager: pluggy.PluginManager,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    plugin_manager.register(DisksPlugin(), name="disks")
    plugin_manager.register(BrokenSectionPlugin(), name="broken")
    data, text = _report(capsys)
    line = "plugin 'broken' (registered directly) could not build this section: RuntimeError('no facts today')"
    assert data["broken"] == {"error": line}
    assert f"\n\nbroken section\n\n{line}\n\n" in text
    assert data["disks"] == {"disks": ["nvme0", "nvme1"]}  # the other plugin's section is unaffected


def test_a_hook_that_raises_keeps_the_report_whole(plugin_manager: pluggy.PluginManager,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    plugin_manager.register(BrokenHookPlugin(), name="greedy")
    data, text = _report(capsys)
    line = ("plugin 'greedy' (registered directly) raised PluginError(\"report section 'torch' is registered twice: "
            "by zero report itself and by plugin 'greedy' (registered directly)\") in zero_register_report_sections")
    assert data["plugin:greedy"] == {"error": line}
    assert f"\n\nreport sections of plugin 'greedy' (registered directly)\n\n{line}\n\n" in text
    assert set(data["torch"]) == {"version", "path", "cuda"}  # zero-core's own section is kept
