"""Fixtures shared by every test package. Imports no torch: zero-cli and zero-estimate are tested without it."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pluggy
import pytest
from zero_plugins import get_plugin_manager, reset_plugin_manager


@pytest.fixture
def plugin_manager() -> Iterator[pluggy.PluginManager]:
    """A freshly loaded plugin manager; plugins a test registers on it are gone afterwards."""
    reset_plugin_manager()
    yield get_plugin_manager()
    reset_plugin_manager()


@pytest.fixture
def plugin_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path for the plugin distributions a test writes (tests/plugin_dists.py); the plugin
    manager is reloaded before and after, and the modules imported from the folder are forgotten."""
    monkeypatch.syspath_prepend(str(tmp_path))
    reset_plugin_manager()
    yield tmp_path
    reset_plugin_manager()
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


@pytest.fixture
def run_ranks():  # type: ignore[no-untyped-def]
    """`run_ranks(fn, world_size, *args, timeout=...)`: fn(rank, world_size, *args) on spawned gloo ranks."""
    from multirank import run_ranks

    return run_ranks


@pytest.fixture
def solo_process_group() -> Iterator[None]:
    """Destroys the world-of-one process group that zero_core.initialize makes in a process without a launcher."""
    import torch.distributed as dist

    was_initialized = dist.is_initialized()
    yield
    if dist.is_initialized() and not was_initialized:
        dist.destroy_process_group()
