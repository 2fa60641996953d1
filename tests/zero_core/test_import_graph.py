"""zero-core's modules import one another without cycles, and no subpackage reaches into another's private modules.

The graph is read from the source (every import statement, including those under
`TYPE_CHECKING` and inside functions), so a cycle hidden from the interpreter by a late
import still fails here. As grimp does, importing `package.module` counts as an edge to
that module only, not to its package's `__init__`.
"""
from __future__ import annotations

import ast
from pathlib import Path

import zero_core

ROOT = Path(zero_core.__file__).parent
PACKAGE = "zero_core"


def _module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in ROOT.rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in known:
                    found.add(submodule)
                elif target in known:
                    found.add(target)
    found.discard(name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_no_import_cycle_among_zero_core_modules() -> None:
    graph = _graph()
    assert len(graph) > 50, "the graph covers every module of zero_core"
    assert "zero_core.sharding._bucket" in graph["zero_core.sharding._packed_bucket"], "relative imports resolve"
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_subpackage_imports_another_subpackages_private_module() -> None:
    offenders = []
    for name, targets in _graph().items():
        owner = name.split(".")[1] if name.count(".") >= 1 else ""
        for target in targets:
            parts = target.split(".")
            private = any(part.startswith("_") and not part.startswith("__") for part in parts[2:])
            if private and len(parts) > 2 and parts[1] != owner:
                offenders.append(f"{name} -> {target}")
    assert offenders == []
