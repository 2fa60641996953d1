"""Fixtures for zero-pin's tests.

The native op is built once per test session into a fresh TORCH_EXTENSIONS_DIR, exactly as
on a clean machine; subprocesses inherit the directory and reuse that build.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

import zero_pin

_PREVIOUS = pytest.StashKey["str | None"]()


def pytest_configure(config: pytest.Config) -> None:
    # Runs at collection, before any test of any package: whichever test first uses the
    # native backend builds it here.
    config.stash[_PREVIOUS] = os.environ.get("TORCH_EXTENSIONS_DIR")
    os.environ["TORCH_EXTENSIONS_DIR"] = tempfile.mkdtemp(prefix="zero-pin-torch-extensions-")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(os.environ.pop("TORCH_EXTENSIONS_DIR"), ignore_errors=True)
    previous = config.stash.get(_PREVIOUS, None)
    if previous is not None:
        os.environ["TORCH_EXTENSIONS_DIR"] = previous


@pytest.fixture(scope="session")
def torch_extensions_dir() -> Path:
    return Path(os.environ["TORCH_EXTENSIONS_DIR"])


@pytest.fixture(autouse=True)
def default_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DS_PIN_MEMORY_BACKEND", raising=False)


@pytest.fixture(scope="session")
def native() -> zero_pin.PinBackend:
    """The process-wide native backend (its first use builds the op)."""
    return zero_pin.get_backend("native")


@pytest.fixture
def run_python() -> Callable[..., subprocess.CompletedProcess]:
    """Run a Python snippet in a fresh interpreter; its last stdout line is parsed as JSON."""

    def run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, "-c", code], env={**os.environ, **(env or {})},
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        result.data = json.loads(result.stdout.strip().splitlines()[-1])
        return result

    return run


@pytest.fixture
def native_locked() -> Callable[[], int]:
    """Bytes the native backend holds locked now, from zero-pin's accounting."""
    return lambda: zero_pin.pinned_memory_stats()["backends"].get("native", {}).get("current", 0)
