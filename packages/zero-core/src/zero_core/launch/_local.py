"""Run a function on N local ranks of a process group, as torchrun would, with a timeout.

- Each rank is a fresh process with this process's environment plus torchrun's (RANK, WORLD_SIZE,
  LOCAL_RANK, MASTER_ADDR, MASTER_PORT on a free port) and OMP_NUM_THREADS=1, so the code it
  runs initialises torch.distributed exactly as it would under torchrun. Ranks fork from a
  server process that imported torch once (multiprocessing's forkserver), rather than each
  importing it anew (about 3 s of CPU per rank on a 2-core machine); the server never touches
  an accelerator, so forking from it is safe for CUDA too.
- A rank that raises ends the run at once with its traceback, and the other ranks are killed
  (they would otherwise wait forever in a collective).
- Ranks still running after `timeout` seconds are killed: a collective that never completes
  fails instead of hanging.
- A rank ends with `os._exit` once its result (or error) is written and Python's exit handlers have
  run, so a crash in C++ teardown cannot turn a finished rank into a failed one (`_end_rank`).

`fn` must be a module-level function (the rank's process imports it by name); it is called as
`fn(rank, world_size, *args)` and its return value (tensors allowed) comes back in rank order.
`zero profile` runs its ranks through this, and so does every multi-rank test (tests/multirank.py).
"""
from __future__ import annotations

import atexit
import contextlib
import faulthandler
import multiprocessing
import os
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from zero_plugins import DetailedError

DEFAULT_TIMEOUT = 180.0


class RanksFailed(DetailedError, RuntimeError):
    """A rank raised or died, or ranks were still running at the timeout; the message says which and why, and
    `detail` holds the failed rank's traceback (the `zero` command prints it with its line breaks)."""


def run_ranks(fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = DEFAULT_TIMEOUT,
              env: dict[str, str] | None = None) -> list[Any]:
    """`fn(rank, world_size, *args)` on each rank; the return values in rank order, or RanksFailed."""
    with started_ranks(fn, world_size, *args, env=env) as (processes, out):
        _wait(processes, out, timeout)
        return [_load(out / f"{rank}.result") for rank in range(world_size)]


@contextlib.contextmanager
def started_ranks(fn: Callable[..., Any], world_size: int, *args: Any,
                  env: dict[str, str] | None = None) -> Iterator[tuple[list[BaseProcess], Path]]:
    """The ranks' processes, started, and the folder their results go to; every one is killed on exit.

    For tests that must act on a rank while it runs (kill it mid-save); others use run_ranks.
    """
    if not 1 <= world_size <= 8:
        raise ValueError(f"world_size must be 1..8 (got {world_size})")
    context = _rank_context()
    port = free_port()
    # A forkserver child copies the server's environment, not ours: each rank is handed ours.
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    with tempfile.TemporaryDirectory(prefix="multirank-") as tmp:
        out = Path(tmp)
        processes: list[BaseProcess] = []
        for rank in range(world_size):
            process = context.Process(target=_rank_main, name=f"rank{rank}", daemon=True,
                                      args=(fn, rank, world_size, port, str(out), args, environment))
            process.start()
            processes.append(process)
        try:
            yield processes, out
        finally:
            _kill(processes)


def _rank_context() -> ForkServerContext | SpawnContext:
    """forkserver where the platform has it (Linux, macOS), spawn elsewhere: both start ranks that share
    nothing with this process but what they are handed."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # What every rank imports (read when the server starts, once per process); a module not installed
    # (transformers is optional) is skipped by the server.
    context.set_forkserver_preload(["torch", "zero_core.engine", "transformers.modeling_utils"])
    return context


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _rank_main(fn: Callable[..., Any], rank: int, world_size: int, port: int, out: str,
               args: tuple[Any, ...], environment: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(environment)
    os.environ.update({
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
    })
    import torch
    import torch.distributed as dist

    faulthandler.enable()  # a rank that dies in C++ (SIGABRT, SIGSEGV) prints where its threads were
    torch.set_num_threads(1)
    try:
        result = fn(rank, world_size, *args)
        if dist.is_initialized():
            dist.destroy_process_group()
        torch.save(result, Path(out) / f"{rank}.result")
        code = 0
    except BaseException:
        (Path(out) / f"{rank}.error").write_text(traceback.format_exc())
        code = 1
    _end_rank(code)


def _end_rank(code: int) -> None:
    """Exit without the interpreter's teardown. Python's exit handlers run (swap files removed, finalizers),
    C++'s static destructors do not: there gloo's threads sometimes abort a rank that had finished and written
    its result ("terminate called without an active exception", SIGABRT; about 1 run in 8 of the fault-injection
    fixture on this host, also before issue 20's changes)."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _first_to_fail(ranks: list[int], out: Path) -> int:
    """Of the failed ranks, the one whose error was written first: a rank that raises ends at once, and its
    peers then fail in their collectives ("Connection closed by peer"), which is not the cause to report."""
    written = {rank: (out / f"{rank}.error").stat().st_mtime_ns for rank in ranks if (out / f"{rank}.error").exists()}
    return min(written, key=lambda rank: (written[rank], rank)) if written else ranks[0]


def _wait(processes: list[BaseProcess], out: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        failed = [p for p in processes if p.exitcode not in (None, 0)]
        if failed:
            rank = _first_to_fail([processes.index(p) for p in failed], out)
            error = out / f"{rank}.error"
            if error.exists():
                raise RanksFailed(f"rank {rank} of {len(processes)} failed; its traceback:", error.read_text())
            raise RanksFailed(f"rank {rank} of {len(processes)} failed: exit code {failed[0].exitcode} (killed or "
                              "crashed)")
        if all(p.exitcode == 0 for p in processes):
            return
        time.sleep(0.05)
    stuck = [rank for rank, p in enumerate(processes) if p.exitcode is None]
    raise RanksFailed(f"ranks {stuck} of {len(processes)} still running after {timeout:.0f}s "
                         "(a collective that never completes?); killed them")


def _kill(processes: list[BaseProcess]) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join()


def _load(path: Path) -> Any:
    import torch

    return torch.load(path, weights_only=False)
