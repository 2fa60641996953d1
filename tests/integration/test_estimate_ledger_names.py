"""zero-estimate and the engine's ledger name memory the same way, so the two compare line by line.

Layering keeps the two lists apart (zero-estimate may not import zero-core), so this test is
what keeps them in step.
"""
from __future__ import annotations

from zero_core.memory import CATEGORIES as LEDGER
from zero_estimate._lines import CATEGORIES as ESTIMATE

# The estimator models the stage 1-2 all-gather bucket as memory of its own; the ledger counts
# collectives as bytes sent (memory_report()'s collectives table), not as a memory category.
ESTIMATE_ONLY = {"comm"}
# Seen only by measuring: held gathered params are a defect the engine detects. (Pinned host
# memory is a location in both, "host.pinned", not a category.)
LEDGER_ONLY = {"param.gathered.held"}


def test_every_estimated_category_is_a_ledger_category():
    assert set(ESTIMATE) - set(LEDGER) == ESTIMATE_ONLY


def test_every_ledger_category_is_estimated():
    assert set(LEDGER) - set(ESTIMATE) == LEDGER_ONLY
