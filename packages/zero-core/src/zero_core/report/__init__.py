"""`zero report`: what zero sees in this environment, modelled on DeepSpeed's ds_report.

Plugins add sections through the `zero_register_report_sections` hook (see _hookspecs.py).
Exports load on first use: a plugin's section imports ReportTable without the report's torch facts.
"""
from typing import TYPE_CHECKING

from zero_plugins import lazy_exports

# The exports, each declared once: mypy reads these imports, and lazy_exports reads them to import each
# name on first use (`name as name` is mypy's explicit re-export).
if TYPE_CHECKING:
    from ._build import build_report as build_report
    from ._table import ReportTable as ReportTable

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
