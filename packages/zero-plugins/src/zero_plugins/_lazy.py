"""Lazy package exports (PEP 562), declared once: in the package's `if TYPE_CHECKING:` block.

An entry-point module such as `zero_core._plugin` imports its parent package first, so a
package whose public API needs torch must not import it in `__init__`: listing plugins
and `zero estimate` would then pay for torch. Such a package writes its exports as the
imports of its `if TYPE_CHECKING:` block, each `name as name` (mypy's explicit re-export),
and `lazy_exports` reads that block to import each name on first attribute access.
"""
from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple


class LazyExports(NamedTuple):
    getattr: Callable[[str], Any]
    dir: Callable[[], list[str]]
    names: list[str]  # the package's exports, in the order declared: its __all__


def lazy_exports(package: str, init_file: str) -> LazyExports:
    """The `__getattr__`, `__dir__` and export names of `package`, whose `__init__` is `init_file`."""
    exports = _declared_exports(Path(init_file))

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        source = exports[name]
        # `from . import comm as comm` names a subpackage; any other import names an attribute of its module.
        value = (importlib.import_module(f".{name}", package) if source == "." else
                 getattr(importlib.import_module(source, package), name))
        importlib.import_module(package).__dict__[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(exports) | set(importlib.import_module(package).__dict__))

    return LazyExports(__getattr__, __dir__, list(exports))


def _declared_exports(init_file: Path) -> dict[str, str]:
    """name -> the module it is imported from, for every import under the file's `if TYPE_CHECKING:`."""
    exports: dict[str, str] = {}
    for node in ast.parse(init_file.read_text(encoding="utf-8"), filename=str(init_file)).body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.ImportFrom):
                raise TypeError(f"{init_file}:{statement.lineno}: the TYPE_CHECKING block of a lazy package holds "
                                "only `from module import name as name` lines")
            module = "." * statement.level + (statement.module or "")
            for alias in statement.names:
                if alias.asname != alias.name:
                    raise TypeError(f"{init_file}:{statement.lineno}: write `{alias.name} as {alias.name}`, "
                                    "mypy's explicit re-export, so the name is exported")
                exports[alias.name] = module
    if not exports:
        raise TypeError(f"{init_file}: no `if TYPE_CHECKING:` imports, which declare a lazy package's exports")
    return exports
