"""Hooks called by `zero report`."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from zero_plugins import hookspec

if TYPE_CHECKING:
    from ._table import ReportTable


@hookspec
def zero_register_report_sections(register: Callable[[str, str, Callable[[], ReportTable]], None]) -> None:
    """Call `register(key, title, build)` for each section the plugin adds to `zero report`.

    `key` is the section's key in `zero report --json` (an identifier such as "swap_backends"),
    `title` its heading in the text output. `build()` gathers the facts and returns a
    zero_core.report.ReportTable; it runs only when the report is built, so keep the hook itself
    to imports and `register` calls. A `build()` that raises does not stop the report: its
    section shows one line naming the plugin and the error instead.
    """
