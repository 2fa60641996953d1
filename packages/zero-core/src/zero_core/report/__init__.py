"""`zero report`: what zero sees in this environment, modelled on DeepSpeed's ds_report.

Plugins add sections through the `zero_register_report_sections` hook (see _hookspecs.py).
Exports load on first use: a plugin's section imports ReportTable without the report's torch facts.
"""
from typing import TYPE_CHECKING

from zero_plugins import lazy_exports

_EXPORTS = {
    "build_report": "._build",
    "ReportTable": "._table",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # `name as name` is mypy's explicit re-export; it reads no computed __all__
    from ._build import build_report as build_report
    from ._table import ReportTable as ReportTable

__all__ = [*_EXPORTS]
