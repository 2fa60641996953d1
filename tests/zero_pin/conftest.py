"""Fixtures for zero-pin's tests.

The native op is built once per test session into a fresh TORCH_EXTENSIONS_DIR, exactly as
on a clean machine; subprocesses get the same directory and reuse that build.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import zero_pin


@pytest.fixture(scope="session", autouse=True)
def torch_extensions_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("torch_extensions")
    previous = os.environ.get("TORCH_EXTENSIONS_DIR")
    os.environ["TORCH_EXTENSIONS_DIR"] = str(path)
    yield path
    if previous is None:
        del os.environ["TORCH_EXTENSIONS_DIR"]
    else:
        os.environ["TORCH_EXTENSIONS_DIR"] = previous


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
