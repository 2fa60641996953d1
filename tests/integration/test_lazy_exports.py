"""Each lazy package (zero_plugins.lazy_exports) declares its exports once, as the imports of its TYPE_CHECKING
block; every one of them must resolve at run time to what mypy was told it is."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[2] / "packages"
LAZY_INITS = sorted(path for path in PACKAGES.glob("*/src/**/__init__.py") if "lazy_exports(" in path.read_text())


def _module_name(init: Path) -> str:
    source_root = next(parent for parent in init.parents if parent.name == "src")
    return ".".join(init.parent.relative_to(source_root).parts)


def test_the_lazy_packages_are_found():
    names = {_module_name(path) for path in LAZY_INITS}
    assert {"zero_core", "zero_core.checkpoint", "zero_core.profile", "zero_core.report", "zero_offload",
            "zero_offload.swap"} <= names


@pytest.mark.parametrize("init", LAZY_INITS, ids=lambda path: str(path.relative_to(PACKAGES)))
def test_every_declared_export_resolves(init: Path):
    package = importlib.import_module(_module_name(init))
    assert package.__all__ and set(package.__all__) <= set(dir(package))
    for name in package.__all__:
        assert getattr(package, name) is not None, f"{package.__name__}.{name}"
    with pytest.raises(AttributeError, match=f"module '{package.__name__}' has no attribute 'not_an_export'"):
        package.not_an_export  # noqa: B018
