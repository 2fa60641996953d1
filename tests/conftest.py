"""Fixtures shared by every test package. Imports no torch: zero-cli and zero-estimate are tested without it."""
from __future__ import annotations

from collections.abc import Iterator

import pluggy
import pytest
from zero_plugins import get_plugin_manager, reset_plugin_manager


@pytest.fixture
def plugin_manager() -> Iterator[pluggy.PluginManager]:
    """A freshly loaded plugin manager; plugins a test registers on it are gone afterwards."""
    reset_plugin_manager()
    yield get_plugin_manager()
    reset_plugin_manager()
