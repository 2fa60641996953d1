"""Third-party plugin distributions made on the fly: a `*.dist-info` folder (METADATA and entry_points.txt)
and its modules, written into a folder that a test puts on sys.path (or PYTHONPATH for a fresh interpreter).
importlib.metadata finds such a folder exactly as it finds one pip installed, so the manager loads it as
any installed plugin; nothing is installed in the environment.

Imported like cli_helpers.py (tests/ is on sys.path); it imports nothing of zero's.
"""
from __future__ import annotations

from pathlib import Path


def write_distribution(site: Path, name: str, version: str, entry_points: dict[str, str],
                       modules: dict[str, str]) -> Path:
    """Write distribution `name` with `zero` entry points (entry point name -> module) and module sources."""
    site.mkdir(parents=True, exist_ok=True)
    dist_info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (dist_info / "entry_points.txt").write_text(
        "[zero]\n" + "".join(f"{point} = {target}\n" for point, target in entry_points.items()))
    for module, source in modules.items():
        (site / f"{module}.py").write_text(source)
    return site
