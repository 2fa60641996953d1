"""Links under nvme_path are never followed (issue 33, item 1; docs/reliability.md, "Swap files and links").

Each case plants a symbolic link where zero-offload creates or deletes: the stale-run cleanup, the run and rank
directories a run makes, a category folder, a swap file, the swap bench's files. Zero refuses or skips it, naming
it, and what the link points at is left as it was.
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from zero_offload.nvme import RUN_PREFIX, SwapDirectory, remove_stale_runs
from zero_offload.nvme._run_dir import MARKER
from zero_offload.swap import SwapError, aligned_empty, get_swap_backend
from zero_offload.swap._bench import _Files
from zero_offload.swap._errors import SwapLinkError

from swap_helpers import direct_directory


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    yield from direct_directory(tmp_path)


def _outside(disk: Path) -> tuple[Path, Path]:
    """A directory outside nvme_path that looks like a rank directory, with a file in it: (directory, file)."""
    outside = disk / "outside"
    (outside / "rank0").mkdir(parents=True)
    precious = outside / "rank0" / "precious.bin"
    precious.write_bytes(b"not zero's")
    return outside, precious


def _stale_rank(run: Path, rank: str = "rank0") -> None:
    """A rank left by a run that died: its lock as zero writes it (the marker and the directory's name), unlocked."""
    (run / f"{rank}.lock").write_text(f"{MARKER}{rank}\n")


def _cleanup(root: Path) -> tuple[int, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reclaimed = remove_stale_runs(root)
    return reclaimed, [str(w.message) for w in caught]


def test_stale_cleanup_skips_a_run_directory_that_is_a_link(disk: Path) -> None:
    root = disk / "nvme"
    root.mkdir()
    outside, precious = _outside(disk)
    _stale_rank(outside)
    (root / f"{RUN_PREFIX}planted").symlink_to(outside)
    reclaimed, messages = _cleanup(root)
    assert reclaimed == 0
    assert messages == [f"left in place under {root}, not zero's to remove: {root}/{RUN_PREFIX}planted (a link, "
                        "not followed)"]
    assert precious.read_bytes() == b"not zero's" and (outside / "rank0.lock").exists()


def test_stale_cleanup_skips_a_rank_directory_that_is_a_link(disk: Path) -> None:
    root = disk / "nvme"
    run = root / f"{RUN_PREFIX}dead"
    run.mkdir(parents=True)
    outside, precious = _outside(disk)
    _stale_rank(run)
    (run / "rank0").symlink_to(outside / "rank0")
    reclaimed, messages = _cleanup(root)
    assert reclaimed == 0
    assert messages == [f"left in place under {root}, not zero's to remove: {run}/rank0 (a link, not followed)"]
    assert precious.read_bytes() == b"not zero's" and (run / "rank0").is_symlink()


def test_stale_cleanup_skips_a_lock_that_is_a_link_or_lacks_the_marker(disk: Path) -> None:
    root = disk / "nvme"
    run = root / f"{RUN_PREFIX}dead"
    (run / "rank0").mkdir(parents=True)
    (run / "rank1").mkdir()
    (run / "rank0.lock").write_text("someone else's\n")
    outside, _ = _outside(disk)
    _stale_rank(outside)
    (run / "rank1.lock").symlink_to(outside / "rank0.lock")
    reclaimed, messages = _cleanup(root)
    assert reclaimed == 0
    assert messages == [f"left in place under {root}, not zero's to remove: {run}/rank0.lock (not a lock zero wrote), "
                        f"{run}/rank1.lock (a link, not followed)"]
    assert (run / "rank0").is_dir() and (run / "rank1").is_dir()


def test_stale_cleanup_still_removes_a_dead_runs_real_directory(disk: Path) -> None:
    root = disk / "nvme"
    run = root / f"{RUN_PREFIX}dead"
    (run / "rank0" / "optim.master").mkdir(parents=True)
    (run / "rank0" / "optim.master" / "w.swp").write_bytes(b"\0" * 8192)
    outside, precious = _outside(disk)
    (run / "rank0" / "optim.master" / "escape").symlink_to(outside)  # rmtree removes the link, not its target
    _stale_rank(run)
    reclaimed, messages = _cleanup(root)
    assert reclaimed == 8192  # the swap file's blocks; the link's target is not counted
    assert messages == [f"removed swap files left by runs that did not finish (8.00 KiB): {run}/rank0"]
    assert not run.exists() and precious.read_bytes() == b"not zero's"


def test_a_run_directory_that_is_a_link_is_refused_not_used(disk: Path) -> None:
    root = disk / "nvme"
    root.mkdir()
    outside, _ = _outside(disk)
    (root / f"{RUN_PREFIX}abc").symlink_to(outside)
    with pytest.raises(SwapLinkError) as caught, pytest.warns(UserWarning, match="a link, not followed"):
        SwapDirectory.open(root, "abc", 1)
    assert str(caught.value) == (
        f"{root}/{RUN_PREFIX}abc is a link, not a directory, where zero keeps this run's swap files; zero never "
        "follows links there (they could point outside nvme_path): remove it, or point nvme_path at another directory")
    assert sorted(p.name for p in outside.iterdir()) == ["rank0"]  # no lock, no rank1 made through the link


def test_a_rank_directory_that_is_a_link_is_refused_not_used(disk: Path) -> None:
    root = disk / "nvme"
    run = root / f"{RUN_PREFIX}abc"
    run.mkdir(parents=True)
    outside, precious = _outside(disk)
    (run / "rank0").symlink_to(outside / "rank0")
    with pytest.raises(SwapLinkError, match=f"^{run}/rank0 is a link, not a directory, where zero keeps rank 0's swap"):
        SwapDirectory.open(root, "abc", 0)
    assert precious.read_bytes() == b"not zero's" and (run / "rank0").is_symlink()


@pytest.mark.parametrize("write", [True, False], ids=["write", "read"])
def test_a_swap_file_that_is_a_link_is_refused(disk: Path, write: bool) -> None:
    target = disk / "target.bin"
    target.write_bytes(b"x" * 4096)
    link = disk / "w.swp"
    link.symlink_to(target)
    buffer = aligned_empty(1024, torch.float32, pin=False).fill_(1.0)
    with get_swap_backend(None) as backend:
        with pytest.raises(SwapLinkError) as caught:
            (backend.write if write else backend.read)(buffer, str(link))
    assert str(caught.value) == (f"{link} is a symbolic link where zero keeps a swap file; zero never reads or writes "
                                 "through a link there (it could point outside nvme_path): remove the link")
    assert target.read_bytes() == b"x" * 4096 and torch.equal(buffer, torch.ones(1024))


def test_the_swap_bench_refuses_a_name_it_would_overwrite_and_remove(disk: Path) -> None:
    planted = disk / f"zero-swap-bench-{os.getpid()}-raw.bin"
    planted.symlink_to(disk / "elsewhere.bin")
    with pytest.raises(SwapError) as caught:
        _Files(str(disk))
    assert str(caught.value) == (f"--path: {planted} already exists (a link); zero swap bench writes and removes "
                                 "files of that name, so remove it or pass another --path")
    assert planted.is_symlink()
