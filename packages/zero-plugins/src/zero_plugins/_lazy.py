"""Lazy package exports (PEP 562).

An entry-point module such as `zero_core._plugin` imports its parent package first, so a
package whose public API needs torch must not import it in `__init__`: listing plugins
and `zero estimate` would then pay for torch. Packages declare their exports here and
import them on first attribute access instead.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return (__getattr__, __dir__) for `package`; `exports` maps a name to its relative module."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name], package), name)
        importlib.import_module(package).__dict__[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(exports) | set(importlib.import_module(package).__dict__))

    return __getattr__, __dir__
