"""The one spawn helper of the multi-rank tests: zero_core.launch (also the `run_ranks` fixture in conftest.py).

Each rank is a fresh spawned process with torchrun's environment and OMP_NUM_THREADS=1; a rank that raises
fails the test at once with its traceback (RanksFailed) and the others are killed; ranks still running after
`timeout` seconds are killed and the test fails, so a broken collective fails CI instead of hanging it.
"""
from __future__ import annotations

from zero_core.launch import DEFAULT_TIMEOUT, RanksFailed, free_port, run_ranks, started_ranks

__all__ = ["DEFAULT_TIMEOUT", "RanksFailed", "free_port", "run_ranks", "started_ranks"]
