"""zero-estimate and the engine's ledger name memory with one set of categories, and docs/ledger.md lists it.

Layering keeps the two lists apart (zero-estimate may not import zero-core), so this test keeps them in step.
"""
from __future__ import annotations

import re
from pathlib import Path

from zero_core.memory import CATEGORIES as LEDGER
from zero_estimate import CATEGORIES as ESTIMATE

LEDGER_DOC = Path(__file__).resolve().parents[2] / "docs" / "ledger.md"


def test_the_estimator_uses_the_ledgers_categories() -> None:
    assert tuple(ESTIMATE) == tuple(LEDGER)


def test_the_ledger_docs_category_table_lists_the_same_names() -> None:
    text = LEDGER_DOC.read_text(encoding="utf-8")
    table = text.split("## Categories", 1)[1].split("\n## ", 1)[0]
    names = re.findall(r"^\| `([a-z.]+)` \|", table, flags=re.MULTILINE)
    assert sorted(names) == sorted(LEDGER)
