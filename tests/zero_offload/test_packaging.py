"""zero-offload is installed as a plugin distribution whose entry point loads without torch."""
from __future__ import annotations

import subprocess
import sys
from importlib import metadata


def test_entry_point_is_declared_and_loads():
    (entry_point,) = [ep for ep in metadata.entry_points(group="zero") if ep.name == "offload"]
    assert entry_point.value == "zero_offload._plugin"
    assert entry_point.dist.name == "zero-offload"
    module = entry_point.load()
    assert module.__name__ == "zero_offload._plugin"


def test_loading_the_entry_point_imports_no_torch():
    code = "import sys, zero_offload._plugin; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "False"
