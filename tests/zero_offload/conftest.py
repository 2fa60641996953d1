"""Fixtures for zero-offload's tests."""
from __future__ import annotations

import pytest
import zero_pin


@pytest.fixture(scope="session")
def native_pin_backend() -> zero_pin.PinBackend:
    """The native pin backend, built here once so that spawned ranks (which inherit
    TORCH_EXTENSIONS_DIR) load the op instead of building it each."""
    return zero_pin.get_backend("native")
