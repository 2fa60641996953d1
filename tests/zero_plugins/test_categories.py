"""The memory categories: one enum, written as its names in reports, and the only place the names are spelled."""
from __future__ import annotations

import io
import json
import tokenize
from pathlib import Path

import pytest
from zero_plugins import UNOWNED_CATEGORIES, Category

PACKAGES = Path(__file__).resolve().parents[2] / "packages"
VOCABULARY = PACKAGES / "zero-plugins" / "src" / "zero_plugins" / "_categories.py"


def test_a_category_is_written_as_its_name_everywhere() -> None:
    held = Category.PARAM_GATHERED_HELD
    assert held == "param.gathered.held" and str(held) == "param.gathered.held"
    assert f"{held}|{held:>22}" == "param.gathered.held|   param.gathered.held"
    assert json.dumps({held: 1}) == '{"param.gathered.held": 1}'
    assert {"optim.master": 3}[Category.OPTIM_MASTER] == 3  # reports keyed by name are read by member
    assert UNOWNED_CATEGORIES == {"activations", "other"}


def test_an_unknown_name_lists_the_known_ones() -> None:
    assert Category.named("grad.bucket") is Category.GRAD_BUCKET
    with pytest.raises(ValueError, match=r"unknown memory category 'optim\.masters'; known: param\.partition, .*other"):
        Category.named("optim.masters")


def _category_literals(path: Path) -> list[str]:
    names = {category.value for category in Category}
    found = []
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type == tokenize.STRING and token.string[:1] in "\"'" and token.string[1:-1] in names:
            found.append(f"{path.relative_to(PACKAGES)}:{token.start[0]}: {token.string}")
    return found


def test_no_package_spells_a_category_name_outside_the_vocabulary() -> None:
    sources = [path for path in PACKAGES.glob("*/src/**/*.py") if path != VOCABULARY]
    assert len(sources) > 200
    assert [literal for path in sources for literal in _category_literals(path)] == []
