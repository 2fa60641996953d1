"""`zero report`: the ds_report-style environment report, as text and as JSON."""
from __future__ import annotations

import json
import platform
import sys

import torch
import zero_pin
from zero_plugins import installed_zero_distributions

from cli_helpers import run_zero


def test_json_report_holds_every_section():
    result = run_zero("report", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["python"] == {"version": platform.python_version(), "executable": sys.executable}
    assert report["torch"]["version"] == torch.__version__
    assert report["zero"] == installed_zero_distributions()
    accelerator = report["accelerator"]
    assert accelerator["selected"] == "cpu"
    assert accelerator["reason"].startswith("auto-detected")
    assert accelerator["memory_stats_source"] == "process RSS"
    assert {entry["name"] for entry in accelerator["accelerators"]} == {"cpu", "cuda"}
    pin = report["pinning"]
    assert {entry["name"] for entry in pin["backends"]} >= {"torch", "native"}
    assert pin["memlock_limit"] == zero_pin.memlock_limit()
    assert pin["native_op"]["state"] in {"built", "not built", "cannot build"}
    assert set(report["build_tools"]) == {"ninja", "cxx_compiler", "python_headers"}
    assert {entry["name"] for entry in report["plugins"]} >= {"cli", "core", "pin"}


def test_text_report_is_plain_tables():
    result = run_zero("report")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for heading in ("accelerators", "pin backends (DS_PIN_MEMORY_BACKEND)", "plugins"):
        assert f"\n{heading}\n" in text
    assert "accelerator     cpu (auto-detected" in text
    assert "memlock limit" in text and "native pin op" in text


def test_explicit_accelerator_is_reported_with_its_reason():
    result = run_zero("report", "--json", DS_ACCELERATOR="cpu")
    assert json.loads(result.stdout)["accelerator"]["reason"] == "DS_ACCELERATOR=cpu"


def test_unknown_accelerator_fails_with_one_line_and_no_traceback():
    result = run_zero("report", DS_ACCELERATOR="nope")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "zero: error: unknown accelerator 'nope' (from DS_ACCELERATOR); available: cpu (zero-core), cuda (zero-core)"
    ]
