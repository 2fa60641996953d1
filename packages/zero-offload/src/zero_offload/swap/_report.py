"""The swap backends' section of `zero report`, registered by zero-offload's plugin
(zero-core builds the report but cannot import zero-offload)."""
from __future__ import annotations

from zero_core.report import ReportTable

from ._select import DEFAULT, ENV_VAR, backend_listing

SWAP_REPORT_KEY = "swap_backends"
SWAP_REPORT_TITLE = f"swap backends ({ENV_VAR}, default {DEFAULT})"


def swap_backends_table() -> ReportTable:
    """The same listing as `zero swap check --json`, laid out like the report's pin-backends table."""
    listing = backend_listing()
    rows = [(s["name"], "yes" if s["available"] else "no", "*" if s["selected"] else "", s["reason"], s["distribution"])
            for s in listing["backends"]]
    return ReportTable(["name", "available", "selected", "reason", "distribution"], rows, listing)
