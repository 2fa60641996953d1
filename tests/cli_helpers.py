"""Running the `zero` command in tests: in a fresh interpreter, or in this process through zero_cli.main.

Imported like engine_helpers.py (tests/ is on sys.path). It imports neither torch nor zero_cli
when imported (zero-cli is tested without torch; zero-pin's tests skip the CLI where zero-cli
is not installed).
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any


def run_zero(*args: str, python_flags: Sequence[str] = (), timeout: float = 120,
             **env: str) -> subprocess.CompletedProcess:
    """`python -m zero_cli ARGS` in a fresh interpreter, output captured as text.

    The environment is this process's without DS_ACCELERATOR (the command selects its
    accelerator itself unless a test passes one), plus the variables in `env`.
    """
    environment = {key: value for key, value in os.environ.items() if key != "DS_ACCELERATOR"}
    environment.update(env)
    return subprocess.run([sys.executable, *python_flags, "-m", "zero_cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=environment)


def imported_modules(*args: str) -> list[str]:
    """The modules `zero ARGS` imports (python -X importtime's trace), in order; the command must succeed."""
    result = run_zero(*args, python_flags=("-X", "importtime"))
    assert result.returncode == 0, result.stderr
    trace = [line for line in result.stderr.splitlines() if line.startswith("import time:")]
    return [line.rsplit("|", 1)[-1].strip() for line in trace]


def run_main(capsys: Any, *args: str) -> tuple[int, str, str]:
    """zero_cli.main(ARGS) in this process: its exit code, and what it printed to stdout and stderr."""
    from zero_cli import main

    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err
