"""Transparent huge pages for the native backend's large blocks, on request, where the kernel allows them.

With ZERO_PIN_HUGE_PAGES=1, a block of at least one huge page (2 MiB on x86-64) is aligned to
the huge-page size and advised MADV_HUGEPAGE before it is locked, so mlock faults it in a
huge page at a time rather than 4 KiB at a time. It is off by default: on the development
machine (a VM that hands free memory back to its host) a cold 1 GiB pin took about twice the
CPU time with huge pages, although their munlock and free were 30 times faster (see
docs/pinning.md, "Huge pages"). Nothing fails when huge pages are unavailable: the advice is
skipped, or the kernel ignores it and uses small pages.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import TypedDict

from zero_plugins import env_flag

from ._units import format_bytes

ENV_VAR = "ZERO_PIN_HUGE_PAGES"
THP = Path("/sys/kernel/mm/transparent_hugepage")
DEFAULT_HUGE_PAGE = 2 << 20


class HugePagePolicy(TypedDict):
    """What the native backend does about huge pages here (`zero pin check` reports it)."""

    used: bool
    mode: str  # the kernel's THP setting: always, madvise, never; or "unavailable"
    min_bytes: int  # blocks this large or larger ask for huge pages (the huge-page size)
    reason: str


@functools.cache
def _kernel() -> tuple[str, int]:
    """The THP mode ("always", "madvise", "never", or "unavailable") and the huge-page size."""
    try:
        text = (THP / "enabled").read_text()
    except OSError:  # no THP in this kernel, or not Linux
        return "unavailable", DEFAULT_HUGE_PAGE
    start, end = text.find("["), text.find("]")
    mode = text[start + 1:end] if 0 <= start < end else "unavailable"
    try:
        size = int((THP / "hpage_pmd_size").read_text())
    except (OSError, ValueError):
        size = DEFAULT_HUGE_PAGE
    return mode, size


def _requested() -> bool:
    return env_flag(ENV_VAR, False)


def huge_page_policy() -> HugePagePolicy:
    mode, size = _kernel()
    if not _requested():
        reason = (f"off unless {ENV_VAR}=1, which asks for them for blocks of {format_bytes(size)} or more "
                  f"(transparent huge pages here: {mode})")
        return {"used": False, "mode": mode, "min_bytes": size, "reason": reason}
    if mode in ("always", "madvise"):
        reason = (f"{ENV_VAR}=1, transparent huge pages {mode}: blocks of {format_bytes(size)} or more are "
                  f"aligned to {format_bytes(size)} and advised MADV_HUGEPAGE")
        return {"used": True, "mode": mode, "min_bytes": size, "reason": reason}
    if mode == "never":
        reason = f"{ENV_VAR}=1, but transparent huge pages are 'never' here (/sys/kernel/mm/transparent_hugepage/enabled)"
    else:
        reason = f"{ENV_VAR}=1, but this kernel offers no transparent huge pages"
    return {"used": False, "mode": mode, "min_bytes": size, "reason": reason}


def huge_page_alignment(nbytes: int) -> int:
    """The alignment to ask for a block of `nbytes`: the huge-page size when it should use huge pages, else 0."""
    mode, size = _kernel()
    if nbytes < size or mode not in ("always", "madvise"):
        return 0
    return size if _requested() else 0
