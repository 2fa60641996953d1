"""Each lazy package (zero_plugins.lazy_exports) declares its exports once, in `_EXPORTS`: the
TYPE_CHECKING block that gives mypy their types must import exactly those names from the same modules,
each as `name as name` (mypy's explicit re-export, since it reads no computed `__all__`)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[2] / "packages"
LAZY_INITS = sorted(path for path in PACKAGES.glob("*/src/**/__init__.py") if "lazy_exports(" in path.read_text())


def _literal(tree: ast.Module, name: str) -> object:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == name for target in node.targets):
            return ast.literal_eval(node.value)
    return None


def _type_checking_imports(tree: ast.Module) -> list[tuple[str, str, str | None]]:
    """(module, name, alias) for every import under `if TYPE_CHECKING:`."""
    found: list[tuple[str, str, str | None]] = []
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
                module = "." * statement.level + (statement.module or "")
                found += [(module, alias.name, alias.asname) for alias in statement.names]
    return found


def test_the_lazy_packages_are_found():
    names = {path.parent.name for path in LAZY_INITS}
    assert {"zero_core", "checkpoint", "profile", "report", "zero_offload", "swap"} <= names


@pytest.mark.parametrize("init", LAZY_INITS, ids=lambda path: str(path.relative_to(PACKAGES)))
def test_type_checking_block_names_the_exports_map(init: Path):
    tree = ast.parse(init.read_text())
    exports = _literal(tree, "_EXPORTS")
    subpackages = _literal(tree, "_SUBPACKAGES") or ()
    assert isinstance(exports, dict) and isinstance(subpackages, tuple)
    imports = _type_checking_imports(tree)
    assert all(alias == name for _, name, alias in imports), "write each TYPE_CHECKING import as `name as name`"
    declared = {(module, name) for module, name, _ in imports}
    assert declared == {(module, name) for name, module in exports.items()} | {(".", name) for name in subpackages}
