"""A real third-party plugin distribution, built and installed, then selected by environment variable."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from zero_plugins import BUILTIN_PLUGINS

from cli_helpers import run_zero
from plugin_dists import write_distribution

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


def _path_with(site: Path) -> str:
    """PYTHONPATH: `site` first, then this interpreter's path (so the fresh one runs these sources)."""
    return os.pathsep.join([str(site), *sys.path])


def test_a_plugin_that_cannot_load_does_not_stop_zero_estimate(tmp_path):
    write_distribution(tmp_path, "zero-broken", "1.0", {"broken": "zero_broken_plugin"},
                       {"zero_broken_plugin": "import zero_core\nraise RuntimeError('driver 535 missing')\n"})
    result = run_zero("estimate", "--params", "7B", "--json", PYTHONPATH=_path_with(tmp_path))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)  # the estimate, as JSON alone on stdout
    assert result.stderr == (
        "zero: warning: plugin 'broken' from zero-broken 1.0 (entry point broken = zero_broken_plugin) was not "
        f"loaded: importing it raised RuntimeError('driver 535 missing') at {tmp_path / 'zero_broken_plugin.py'}:2; "
        "its hooks are skipped; update or uninstall zero-broken, or block the plugin with "
        "ZERO_DISABLE_PLUGINS=broken\n")


def test_a_third_party_core_is_refused_and_zero_cores_accelerators_stay(tmp_path):
    source = ("from zero_plugins import hookimpl\n\n@hookimpl\ndef zero_register_accelerators(register):\n"
              "    pass\n")
    write_distribution(tmp_path, "zero-shadow", "0.9", {"core": "zero_shadow_plugin"}, {"zero_shadow_plugin": source})
    result = run_zero("report", "--json", PYTHONPATH=_path_with(tmp_path), DS_ACCELERATOR="cpu")
    assert result.returncode == 0, result.stderr
    accelerator = json.loads(result.stdout)["accelerator"]
    assert accelerator["selected"] == "cpu"
    assert {entry["name"]: entry["distribution"] for entry in accelerator["accelerators"]} == {
        "cpu": "zero-core", "cuda": "zero-core"}
    assert result.stderr == (
        "zero: warning: plugin 'core' from zero-shadow 0.9 (entry point core = zero_shadow_plugin) was not loaded: "
        f"the name 'core' belongs to plugin 'core' from zero-core {metadata.version('zero-core')}, a built-in; its "
        "name must change in zero-shadow's [project.entry-points.zero] table (or uninstall zero-shadow)\n")


def test_the_built_in_names_are_those_of_zeros_distributions():
    """BUILTIN_PLUGINS, which no third party may take, is exactly the entry points zero's packages declare."""
    declared = {}
    for pyproject in sorted((Path(__file__).parents[2] / "packages").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        declared.update({name: project["name"] for name in project.get("entry-points", {}).get("zero", {})})
    assert declared == BUILTIN_PLUGINS
