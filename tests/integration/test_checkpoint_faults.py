"""A save publishes a whole checkpoint or leaves the previous `latest`, with a clear message (issue 33).

Real processes, real files: an asynchronous save as a script's last line; two processes saving into one
save_dir; a full tmpfs and RLIMIT_FSIZE (ENOSPC, EFBIG) under synchronous and asynchronous saves; a rank killed
while a save writes; a tag loaded while another process re-saves it. The in-process cases (the lock's owners,
the reclaimed staging directories) use a world of one. Every subprocess has a timeout.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from multirank import free_port, started_ranks

SCRIPT = Path(__file__).parent / "scripts" / "checkpoint_faults.py"
CONFIG: dict[str, Any] = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
                          "zero_optimization": {"stage": 2}}


def _launch(mode: str, save_dir: Path, arg: str = "", world_size: int = 1,
            prefix: tuple[str, ...] = ()) -> list[subprocess.Popen[str]]:
    """`world_size` ranks of the script, as torchrun starts them (one port per launch)."""
    port = str(free_port())
    ranks = []
    for rank in range(world_size):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1"}
        ranks.append(subprocess.Popen([*prefix, sys.executable, str(SCRIPT), mode, str(save_dir), arg], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return ranks


def _finish(ranks: list[subprocess.Popen[str]], timeout: float = 120) -> list[tuple[int, str, str]]:
    """Each rank's (exit status, stdout, stderr); ranks still running at `timeout` are killed and fail the test."""
    results = []
    for process in ranks:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            pytest.fail(f"a rank of {SCRIPT.name} was still running after {timeout} s")
        results.append((process.returncode, out, err))
    return results


def _report(mode: str, save_dir: Path, arg: str = "", prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    [(code, out, err)] = _finish(_launch(mode, save_dir, arg, prefix=prefix))
    assert code == 0, err
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return report


@pytest.mark.parametrize("world_size", [1, 2])
def test_an_asynchronous_save_as_the_scripts_last_line_is_published(tmp_path: Path, world_size: int) -> None:
    for attempt in range(2):  # it aborted 2 runs in 3 (exit -6) and never published
        save_dir = tmp_path / f"run{attempt}"
        save_dir.mkdir()
        results = _finish(_launch("exit-after-async", save_dir, world_size=world_size))
        assert [code for code, _, _ in results] == [0] * world_size, [err for _, _, err in results]
        assert (save_dir / "latest").read_text() == "last-line"
        assert sorted(p.name for p in save_dir.iterdir()) == ["last-line", "last-line.weights.pt", "latest"]
    report = _report("load", save_dir)
    assert report["tag"] == "last-line" and report["equal"] is True


def test_a_second_process_saving_into_the_same_save_dir_is_refused_naming_the_first(tmp_path: Path) -> None:
    save_dir = tmp_path / "shared"
    save_dir.mkdir()
    intruder = _launch("wait-then-save", save_dir, str(save_dir / ".zero-save.lock"))
    assert intruder[0].stdout is not None and intruder[0].stdout.readline() == "ready\n"
    # 40 layers: 42 MB to write and fsync, so the lock is held long after the intruder sees it
    owner = _launch("exit-after-async", save_dir, "40")  # holds the lock from its save's start to its publishing
    [(code, _, err)] = _finish(owner)
    assert code == 0, err
    [(code, out, err)] = _finish(intruder)
    assert code == 0, err
    message = json.loads(out.strip().splitlines()[-1])["save"]
    assert message.startswith(f"CheckpointError: save_checkpoint: another save is writing into {save_dir}: "
                              f"process {owner[0].pid} on host {socket.gethostname()} holds "
                              f"{save_dir / '.zero-save.lock'}. Two saves into one save_dir would race"), message
    assert (save_dir / "latest").read_text() == "last-line"
    assert sorted(p.name for p in save_dir.iterdir()) == ["last-line", "last-line.weights.pt", "latest"]
    report = _report("load", save_dir, "40")
    assert report["tag"] == "last-line" and report["equal"] is True


def _private_mount() -> tuple[str, ...]:
    """A command prefix giving the script a mount namespace of its own (root, or an unprivileged user namespace)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare(1) to mount a small tmpfs")
    flags = "-m" if os.geteuid() == 0 else "-rm"
    if subprocess.run([unshare, flags, "true"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip(f"`unshare {flags}` is not permitted here: no private tmpfs to fill")
    return unshare, flags


def _needed(message: str) -> int:
    found = re.search(r"the save needed about ([0-9,]+) bytes on this rank and had written [0-9,]+ in ", message)
    assert found is not None, message
    return int(found.group(1).replace(",", ""))


def test_a_full_disk_is_a_checkpoint_error_and_the_previous_latest_loads(tmp_path: Path) -> None:
    save_dir = tmp_path / "tiny"
    save_dir.mkdir()
    # One checkpoint (6.3 MB) and its weights file (1.6 MB) fit in 10 MiB; a second does not.
    prefix = (*_private_mount(), "sh", "-c", f'mount -t tmpfs -o size=10m tmpfs "{save_dir}" && exec "$0" "$@"')
    report = _report("disk-full", save_dir, prefix=prefix)
    second = report["second"]
    # torch's serializer turns the short write into a RuntimeError; the free space names the cause
    assert second.startswith("CheckpointError: save_checkpoint: tag 'second' was not saved: rank 0: the disk is "
                             "full (ENOSPC: "), second
    assert f" bytes free) writing {save_dir}/.zero-staging-" in second, second
    assert "(torch reported it as RuntimeError: [enforce fail at inline_container.cc" in second, second
    assert 6 * 65_792 * 16 <= _needed(second) < 6 * 65_792 * 16 + 30_000  # weights, master, Adam's two states
    assert second.endswith("Nothing was published: `latest` and the checkpoints already there are as they were "
                           "[cause: CheckpointException]"), second
    assert report["left"] == ["first", "first.weights.pt", "latest"]  # the failed staging directory is gone
    assert report["load"]["tag"] == "first" and report["load"]["equal"] is True


def test_a_file_size_limit_fails_saves_and_the_async_ones_at_the_next_step_and_at_destroy(tmp_path: Path) -> None:
    report = _report("size-limit", tmp_path, str(1 << 20))  # each save writes one 2.1 MB file
    for key, tag in (("second", "second"), ("step after third", "third"), ("destroy after fourth", "fourth")):
        assert report[key].startswith(f"CheckpointError: save_checkpoint: tag {tag!r} was not saved: rank 0: a file reached "
                                      "the size limit (EFBIG: ulimit -f / RLIMIT_FSIZE is 1,048,576 bytes) writing "
                                      f"{tmp_path}/.zero-staging-"), (key, report[key])
        assert 2 * 65_792 * 16 <= _needed(report[key]) < 2 * 65_792 * 16 + 30_000
        assert report[key].endswith("[cause: CheckpointException]"), report[key]
    assert report["new engine"] == "no error"  # destroy() removed the hooks before it raised
    assert report["left"] == ["first", "first.weights.pt", "latest"]
    assert report["load"]["tag"] == "first" and report["load"]["equal"] is True


def test_a_tag_loaded_while_another_process_resaves_it_loads_whole_or_says_so(tmp_path: Path) -> None:
    saver = _launch("resave", tmp_path, "12")
    loader = _launch("reload", tmp_path, "10")
    [(code, out, err)] = _finish(loader)
    assert code == 0, err
    counts = json.loads(out.strip().splitlines()[-1])
    [(code, saved, err)] = _finish(saver)
    assert code == 0, err
    assert json.loads(saved)["saves"] > 10
    assert counts["other"] == [] and counts["mixed"] == 0, counts
    assert counts["loaded"] > 10, counts


# --- a rank killed during a save ---

def _save_wide(rank: int, world_size: int, save_dir: str, async_save: bool) -> None:
    import zero_core

    # 12.6M parameters: rank 1 can be killed while the save writes
    engine, _, _, _ = zero_core.initialize(model=torch.nn.Sequential(*(torch.nn.Linear(2048, 2048) for _ in range(3))),
                                           config=CONFIG)
    engine.backward(engine(torch.randn(2, 2048)).pow(2).mean())
    engine.step()
    engine.save_checkpoint(save_dir, tag="killed", async_save=async_save)
    engine.wait_for_checkpoint()


@pytest.mark.parametrize("async_save", [False, True])
def test_a_rank_killed_while_a_save_writes_is_a_collective_failed_naming_it(tmp_path: Path, async_save: bool) -> None:
    start = time.monotonic()
    with started_ranks(_save_wide, 2, str(tmp_path), async_save, env={"ZERO_COLLECTIVE_TIMEOUT": "30"}) \
            as (processes, out):
        while not any(f.stat().st_size > 0 for f in tmp_path.glob(".zero-staging-*/*.distcp")):
            assert time.monotonic() - start < 120, "the save never started writing"
            assert all(p.exitcode is None for p in processes), "a rank ended before the save wrote"
            time.sleep(0.005)
        os.kill(processes[1].pid, signal.SIGKILL)
        while processes[0].exitcode is None and time.monotonic() - start < 100:
            time.sleep(0.1)
        error = (out / "0.error").read_text() if (out / "0.error").exists() else ""
    assert processes[0].exitcode == 1, error
    last = error.strip().splitlines()[-1]
    if async_save:
        assert last.startswith("zero_core.checkpoint._errors.CheckpointError: the asynchronous save of tag 'killed' "
                               "failed: CollectiveFailed: rank 0: save_checkpoint 'killed' (writing) at "), last
    else:
        assert last.startswith("zero_core.comm._failure.CollectiveFailed: rank 0: save_checkpoint 'killed' (writing) "
                               "at save_checkpoint after step 1 lost the connection to rank(s) [1]"), last
    assert "lost the connection to rank(s) [1]" in last, last
    assert not (tmp_path / "killed").exists() and not (tmp_path / "latest").exists()
    assert time.monotonic() - start < 100


# --- the lock's owners and the staging directories, in this process (a world of one) ---

@pytest.fixture
def engine(solo_process_group: None) -> Iterator[Any]:
    import zero_core

    torch.manual_seed(0)
    engine, _, _, _ = zero_core.initialize(model=torch.nn.Linear(4, 4), config=CONFIG)
    yield engine
    engine.destroy()


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          timeout=60)
    return int(done.stdout)


def _lock(save_dir: Path, pid: int, host: str) -> Path:
    save_dir.mkdir(exist_ok=True)
    lock = save_dir / ".zero-save.lock"
    lock.write_text(json.dumps({"pid": pid, "host": host, "run": "0123456789ab"}))
    return lock


def test_a_live_owner_another_hosts_and_an_unreadable_lock_are_refused(engine: Any, tmp_path: Path) -> None:
    from zero_core import CheckpointError

    lock = _lock(tmp_path, os.getppid(), socket.gethostname())
    with pytest.raises(CheckpointError) as live:
        engine.save_checkpoint(tmp_path, tag="a")
    assert str(live.value).startswith(f"save_checkpoint: another save is writing into {tmp_path}: process "
                                      f"{os.getppid()} on host {socket.gethostname()} holds {lock}. Two saves")
    _lock(tmp_path, 1, "elsewhere.example")
    with pytest.raises(CheckpointError) as remote:
        engine.save_checkpoint(tmp_path, tag="a")
    assert f"process 1 on host elsewhere.example holds {lock} (it cannot be checked from host " \
           f"{socket.gethostname()}: if it no longer runs, remove {lock})" in str(remote.value)
    lock.write_text("not json")
    with pytest.raises(CheckpointError) as unreadable:
        engine.save_checkpoint(tmp_path, tag="a")
    assert str(unreadable.value) == (f"save_checkpoint: {lock} exists but is not a lock zero can read, so another "
                                     f"save may be running into {tmp_path}; if none is, remove {lock} and save again")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".zero-save.lock"]  # nothing was written


def test_a_dead_owners_lock_is_taken_over_and_its_marked_staging_reclaimed(engine: Any, tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    dead = _dead_pid()
    _lock(tmp_path, dead, socket.gethostname())
    for name in (".zero-staging-0123456789ab-1", ".zero-staging-0123456789ab-2", ".zero-staging-ba9876543210-1"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__0_0.distcp").write_bytes(b"x" * 10)
    (tmp_path / ".zero-staging-0123456789ab-1.owner").write_text(".zero-staging-0123456789ab-1")
    (tmp_path / ".zero-staging-0123456789ab-1.latest").write_text("half")
    (tmp_path / ".zero-staging-ba9876543210-1.owner").write_text("something else")  # names no directory of ours
    with caplog.at_level(logging.WARNING, logger="zero_core.checkpoint"):
        engine.save_checkpoint(tmp_path, tag="a")
    assert caplog.messages[0] == (f"save_checkpoint: {tmp_path / '.zero-save.lock'} was left by process {dead} on "
                                  f"host {socket.gethostname()}, which no longer runs (a save that was killed); this "
                                  "save takes it over")
    assert caplog.messages[1] == (f"save_checkpoint: removing {tmp_path / '.zero-staging-0123456789ab-1'}, which a "
                                  "save that did not finish left")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".zero-staging-0123456789ab-2", ".zero-staging-ba9876543210-1", ".zero-staging-ba9876543210-1.owner", "a",
        "latest"]  # unmarked (or wrongly marked) directories stay; the lock is released


def test_a_save_right_after_an_asynchronous_one_waits_for_its_lock(engine: Any, tmp_path: Path) -> None:
    engine.save_checkpoint(tmp_path, tag="a", async_save=True)
    assert engine.save_checkpoint(tmp_path, tag="b") == str(tmp_path / "b")  # not refused by a's lock
    engine.save_checkpoint(tmp_path, tag="c", async_save=True)
    engine.save_checkpoint(tmp_path, tag="d", async_save=True)
    assert engine.wait_for_checkpoint() == str(tmp_path / "d")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c", "d", "latest"]
    assert (tmp_path / "latest").read_text() == "d"
