"""NVMe swap directories over a run's life: separate per run, removed at its end, reclaimed after a crash.

- a run killed with SIGKILL leaves its files; the next run on the path removes them at initialize
  with one warning naming the directory and the bytes. A run still alive (holding its lock) on the
  same path keeps its files, and exiting normally without destroy() removes them;
- two runs at once on one path, in one 2-rank job: each has its own zero-run-* directory shared by
  its ranks, destroy() removes each rank's files of that run only, and nothing is left at the end;
- the 8 ranks of one run starting at the same moment never take a rank's lock, while it is being
  created, for a dead run's one (which removed that rank's directory and warned falsely).
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import zero_pin

import zero_core
from multirank import run_ranks
from swap_helpers import direct_directory


def _config(root: Path | str, stage: int = 2) -> dict[str, Any]:
    nvme = {"device": "nvme", "nvme_path": str(root), "buffer_count": 4, "pipeline_read": False, "pipeline_write": False}
    return {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": stage, "offload_optimizer": nvme}}


def _step(engine: Any) -> None:
    engine.backward(engine(torch.randn(2, 16)).pow(2).mean())
    engine.step()


def _runs(root: Path | str) -> set[str]:
    return {path.name for path in Path(root).glob("zero-run-*")}


def _files(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*") if path.is_file())


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """An empty nvme_path where O_DIRECT works; its parent has room for the children's logs."""
    for base in direct_directory(tmp_path):
        (base / "nvme").mkdir()
        yield base / "nvme"


# A run in its own interpreter: it initializes, steps, reports its run directory and files, waits for a
# line on stdin (so that both children are past their own initialize), then dies by SIGKILL (`kill`)
# or exits normally without calling destroy() (`wait`).
CHILD = r"""
import json, os, signal, sys, torch, zero_core
root, mode = sys.argv[1], sys.argv[2]
config = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": root,
                                "buffer_count": 4, "pipeline_read": False, "pipeline_write": False}}}
engine = zero_core.initialize(model=torch.nn.Linear(16, 16, bias=False), config=config)[0]
engine.backward(engine(torch.randn(2, 16)).pow(2).mean())
engine.step()
def opened(fd):  # the run's directory is the one whose lock this process holds
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # the descriptor listdir itself used
        return ""
(lock,) = [path for path in map(opened, os.listdir("/proc/self/fd")) if path.endswith("/rank0.lock")]
rank = lock[: -len(".lock")]
files = [os.path.join(d, f) for d, _, names in os.walk(rank) for f in names]
print(json.dumps({"run": os.path.dirname(lock), "files": sorted(files),
                  "bytes": sum(os.stat(f).st_blocks * 512 for f in files)}), flush=True)
sys.stdin.readline()
if mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _start(root: Path, mode: str) -> subprocess.Popen[str]:
    log = root.parent / f"{mode}.stderr"  # a file: a pipe nobody reads while the child runs could fill and stop it
    with open(log, "w") as stderr:
        return subprocess.Popen([sys.executable, "-c", CHILD, str(root), mode], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=stderr, text=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})


def _report(child: subprocess.Popen[str], root: Path, mode: str, timeout: float = 120) -> dict[str, Any]:
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    line = child.stdout.readline() if ready else ""
    if not line:
        child.kill()
        child.wait()
    assert line, f"the {mode} child reported nothing: {(root.parent / f'{mode}.stderr').read_text()}"
    return json.loads(line)


@pytest.mark.usefixtures("solo_process_group")
def test_a_killed_runs_files_are_reclaimed_a_live_runs_kept_and_a_normal_exit_leaves_nothing(root: Path) -> None:
    live, killed = _start(root, "wait"), _start(root, "kill")
    try:
        dead, alive = _report(killed, root, "kill"), _report(live, root, "wait")
        killed.communicate("\n", timeout=60)
        assert killed.returncode == -signal.SIGKILL
        assert all(os.path.exists(f) for f in dead["files"]) and dead["bytes"] > 0  # what a crash leaves behind

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine = zero_core.initialize(model=torch.nn.Linear(16, 16, bias=False), config=_config(root))[0]
        assert [str(w.message) for w in caught if "swap files" in str(w.message)] == [
            f"removed swap files left by runs that did not finish ({zero_pin.format_bytes(dead['bytes'])}): "
            f"{dead['run']}/rank0"]
        assert not os.path.exists(dead["run"])  # its only rank gone, the run's directory went too

        assert all(os.path.exists(f) for f in alive["files"]) and os.path.exists(f"{alive['run']}/rank0.lock")
        (mine,) = _runs(root) - {Path(alive["run"]).name}  # a run of its own beside the live one
        for _ in range(2):
            _step(engine)
        assert any(f.endswith(".exp_avg_sq.swp") for f in _files(root / mine))
        engine.destroy()
        assert _runs(root) == {Path(alive["run"]).name}
        assert all(os.path.exists(f) for f in alive["files"])

        live.communicate("\n", timeout=60)  # exits normally, never calling destroy()
        assert live.returncode == 0, (root.parent / "wait.stderr").read_text()
        assert sorted(os.listdir(root)) == []
    finally:
        for child in (live, killed):
            if child.poll() is None:
                child.kill()
                child.wait()


def _two_runs(rank: int, world_size: int, root: str) -> dict[str, Any]:
    torch.manual_seed(rank)
    engines, runs = [], []
    for stage in (2, 3):  # both alive at once, on one path
        before = _runs(root)
        engines.append(zero_core.initialize(model=torch.nn.Linear(16, 16, bias=False), config=_config(root, stage))[0])
        (run,) = _runs(root) - before
        runs.append(run)
    for _ in range(2):
        for engine in engines:
            _step(engine)
    mine = [Path(root) / run / f"rank{rank}" for run in runs]
    files = [_files(directory) for directory in mine]
    engines[0].destroy()
    after_first = [directory.exists() for directory in mine]
    _step(engines[1])  # the other run goes on
    engines[1].destroy()
    return {"runs": runs, "files": files, "after_first": after_first, "after_both": [d.exists() for d in mine]}


def test_two_runs_on_one_path_do_not_collide_and_destroy_removes_each(root: Path) -> None:
    results = run_ranks(_two_runs, 2, str(root), timeout=120)
    assert results[0]["runs"] == results[1]["runs"]  # the ranks of a run share its directory...
    assert results[0]["runs"][0] != results[0]["runs"][1]  # ...and two runs never do
    for result in results:
        for files in result["files"]:
            assert any(f.startswith("optim.master/") for f in files), files
            assert any(f.startswith("optim.state/") and f.endswith(".exp_avg_sq.swp") for f in files), files
        assert result["after_first"] == [False, True]
        assert result["after_both"] == [False, False]
    assert sorted(os.listdir(root)) == []


# 8 processes as the 8 ranks of one run, started together 300 times (a new run id each time): each
# opens its rank's directory; none may see another's lock as a dead run's, remove it, warn, or fail.
RACE = r"""
import json, multiprocessing, sys, warnings
from pathlib import Path
from zero_offload.nvme import SwapDirectory
root, ranks, rounds = Path(sys.argv[1]), 8, 300
def rank_main(rank, barrier, reports):
    problems = []
    for round in range(rounds):
        barrier.wait()
        directory = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                directory = SwapDirectory.open(root, f"{round:016x}", rank)
            except Exception as error:
                problems.append(f"rank {rank}, round {round}: {error!r}")
        problems += [f"rank {rank}, round {round}: {warning.message}" for warning in caught]
        barrier.wait()
        if directory is not None:
            directory.close()
    reports.put(problems)
if __name__ == "__main__":
    context = multiprocessing.get_context("fork")
    barrier, reports = context.Barrier(ranks, timeout=60), context.Queue()
    processes = [context.Process(target=rank_main, args=(rank, barrier, reports), daemon=True) for rank in range(ranks)]
    for process in processes:
        process.start()
    found = [problem for _ in processes for problem in reports.get(timeout=100)]
    for process in processes:
        process.join()
    print(json.dumps({"exit": [p.exitcode for p in processes], "problems": found[:5], "count": len(found),
                      "left": sorted(p.name for p in root.iterdir())}))
"""


def test_ranks_starting_together_never_take_each_others_lock_for_a_dead_runs(root: Path) -> None:
    result = subprocess.run([sys.executable, "-c", RACE, str(root)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out == {"exit": [0] * 8, "problems": [], "count": 0, "left": []}
