"""A private module (`_name`) is imported only from inside the package that holds it: every other package,
and every sibling subpackage, goes through that package's exports."""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGES = Path(__file__).resolve().parents[2] / "packages"
OURS = ("zero_plugins", "zero_cli", "zero_estimate", "zero_pin", "zero_core", "zero_offload")  # torch's are its own


def _module_name(path: Path) -> str:
    source_root = next(parent for parent in path.parents if parent.name == "src")
    parts = path.relative_to(source_root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.Module, importer: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, absolute dotted name) of every module or name imported, relative imports resolved."""
    here = importer.split(".") if is_package else importer.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*here[: len(here) - node.level + 1], *([base] if base else [])])
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)


def _private_owner(name: str) -> str | None:
    """The package a private module in `name` belongs to (`zero_pin._accounting.X` -> `zero_pin`)."""
    parts = name.split(".")
    if parts[0] not in OURS:
        return None
    for index, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index])
    return None


def test_no_module_imports_another_packages_private_module() -> None:
    sources = sorted(PACKAGES.glob("*/src/**/*.py"))
    assert len(sources) > 200
    crossings = []
    for path in sources:
        importer = _module_name(path)
        for line, name in _imported(ast.parse(path.read_text()), importer, path.name == "__init__.py"):
            owner = _private_owner(name)
            if owner is not None and not (importer == owner or importer.startswith(owner + ".")):
                crossings.append(f"{path.relative_to(PACKAGES)}:{line}: {name}")
    assert crossings == []
