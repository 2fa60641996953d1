"""Shared by the swap-I/O tests: a directory where O_DIRECT works (on a real disk), and /dev/shm's type."""
from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from zero_offload.swap._direct import direct_io_problem, filesystem_type

REPO = Path(__file__).resolve().parents[2]


def direct_directory(tmp_path: Path) -> Iterator[Path]:
    """tmp_path when its file system does O_DIRECT, else a folder under the repository's .pytest-tmp."""
    if direct_io_problem(str(tmp_path)) is None:
        yield tmp_path
        return
    fallback = REPO / ".pytest-tmp" / f"swap-{uuid.uuid4().hex[:8]}"
    fallback.mkdir(parents=True)
    try:
        problem = direct_io_problem(str(fallback))
        if problem is not None:
            pytest.skip(f"no directory with O_DIRECT for the swap tests: {problem}")
        yield fallback
    finally:
        shutil.rmtree(fallback, ignore_errors=True)


def shm_is_tmpfs() -> bool:
    return os.path.isdir("/dev/shm") and filesystem_type("/dev/shm") == "tmpfs"
