"""A real third-party plugin distribution, built and installed, then selected by environment variable."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run_zero

EXAMPLE = Path(__file__).parent / "example_plugin"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """Install the example distribution into its own folder (the dev environment stays untouched)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(EXAMPLE)],
        check=True, timeout=300,
    )
    return target


def test_installed_plugin_is_listed_with_its_distribution(plugin_site):
    result = run_zero("plugins", "--json", PYTHONPATH=str(plugin_site))
    assert result.returncode == 0, result.stderr
    plugins = {entry["name"]: entry for entry in json.loads(result.stdout)}
    assert plugins["example"]["distribution"] == "zero-example-accelerator"
    assert plugins["example"]["version"] == "1.0.0"
    assert plugins["example"]["hooks"] == ["zero_register_accelerators", "zero_register_commands"]


def test_plugin_command_runs(plugin_site):
    result = run_zero("example-hello", "--json", PYTHONPATH=str(plugin_site))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"hello": "example"}


def test_plugin_accelerator_is_selected_by_ds_accelerator(plugin_site):
    result = run_zero("report", "--json", PYTHONPATH=str(plugin_site), DS_ACCELERATOR="example")
    assert result.returncode == 0, result.stderr
    accelerator = json.loads(result.stdout)["accelerator"]
    assert accelerator["selected"] == "example"
    assert accelerator["reason"] == "DS_ACCELERATOR=example"
    providers = {entry["name"]: entry["distribution"] for entry in accelerator["accelerators"]}
    assert providers == {"cpu": "zero-core", "cuda": "zero-core", "example": "zero-example-accelerator"}


def test_disabled_plugin_cannot_be_selected(plugin_site):
    result = run_zero("report", PYTHONPATH=str(plugin_site), DS_ACCELERATOR="example", ZERO_DISABLE_PLUGINS="example")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "zero: error: unknown accelerator 'example' (from DS_ACCELERATOR); available: cpu (zero-core), cuda (zero-core)"
    ]
