"""`zero swap check` and `zero swap bench`, run through the `zero` command in this process.

The bench runs here at a few MiB: these tests check its output and its errors, not the disk's
speed (the figures are recorded in docs/benchmarks.md).
"""
from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_helpers import run_main
from swap_helpers import direct_directory, shm_is_tmpfs

pytest.importorskip("zero_cli")


@pytest.fixture(autouse=True)
def default_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZERO_SWAP_BACKEND", raising=False)
    monkeypatch.delenv("ZERO_SWAP_BUFFERED", raising=False)


@pytest.fixture
def swap_dir(tmp_path: Path) -> Iterator[Path]:
    yield from direct_directory(tmp_path)


def _one_error_line(code: int, out: str, err: str) -> str:
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("zero: error: ")
    return err


def test_check_lists_the_backends(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, "swap", "check")
    assert code == 0
    assert "threads *  yes        zero-offload  O_DIRECT pwrite/preadv from a thread pool" in out
    assert "(* selected by ZERO_SWAP_BACKEND, default threads)" in out and "I/O mode: O_DIRECT" in out
    for argv in (("swap", "check", "--json"), ("swap", "--json", "check")):
        code, out, _ = run_main(capsys, *argv)
        data = json.loads(out)
        assert code == 0 and data["selected"] == "threads" and data["buffered"] is False
        rows = {row["name"]: row for row in data["backends"]}
        assert rows["threads"] == {"name": "threads", "available": True, "selected": True, "distribution": "zero-offload",
                                   "reason": "O_DIRECT pwrite/preadv from a thread pool (built in, nothing to compile)"}
        assert set(rows) == {"threads", "io_uring"} and not rows["io_uring"]["selected"]
        assert rows["io_uring"]["reason"]  # why it is (or is not) available here


def test_check_a_path(capsys: pytest.CaptureFixture[str], swap_dir: Path) -> None:
    code, out, _ = run_main(capsys, "swap", "check", "--path", str(swap_dir), "--json")
    data = json.loads(out)["path"]
    assert code == 0 and data["o_direct"] is True and data["reason"] == "open(..., O_DIRECT) works"


@pytest.mark.skipif(not shm_is_tmpfs(), reason="/dev/shm is not tmpfs here")
def test_check_a_path_without_o_direct(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, "swap", "check", "--path", "/dev/shm")
    assert code == 1 and "/dev/shm (tmpfs): no O_DIRECT: /dev/shm is on tmpfs, which keeps files in host memory" in out


def test_check_an_unknown_backend_is_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZERO_SWAP_BACKEND", "libaio")
    err = _one_error_line(*run_main(capsys, "swap", "check"))
    assert ("unknown swap backend 'libaio' (from ZERO_SWAP_BACKEND); "
            "available: io_uring (zero-offload), threads (zero-offload)") in err


def test_bench_json(capsys: pytest.CaptureFixture[str], swap_dir: Path) -> None:
    code, out, err = run_main(capsys, "swap", "bench", "--path", str(swap_dir), "--size", "4MiB", "--repeat", "2",
                              "--block-size", "256K", "--queue-depth", "4", "--threads", "2", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["aio"] == {"block_size": 262144, "queue_depth": 4, "intra_op_parallelism": 2}
    assert data["backend"] == "threads" and data["mode"] == "O_DIRECT" and data["size"] == 4 * 2**20
    assert data["rounds"] == 2 and all(len(values) == 2 for values in data["samples_gbps"].values())
    for key in ("write_gbps", "read_gbps", "write_ratio", "read_ratio"):
        assert data[key] > 0
    assert data["raw"]["block_size"] == 8 * 2**20 and data["raw"]["threads"] == 1
    assert "round 2/2" in err  # progress goes to stderr, stdout holds the JSON alone
    assert os.listdir(swap_dir) == []  # its files are removed


def test_bench_through_io_uring(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                swap_dir: Path) -> None:
    from zero_offload.swap._uring import IoUringBackend

    available, reason = IoUringBackend.available()
    monkeypatch.setenv("ZERO_SWAP_BACKEND", "io_uring")
    code, out, err = run_main(capsys, "swap", "bench", "--path", str(swap_dir), "--size", "2MiB", "--repeat", "1", "--json")
    if not available:  # never a fallback to `threads`: an error with the reason
        assert code == 2 and reason in err
        return
    assert code == 0 and json.loads(out)["backend"] == "io_uring"
    assert os.listdir(swap_dir) == []


def test_bench_text_and_the_config_aio_block(capsys: pytest.CaptureFixture[str], swap_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({"train_batch_size": 8, "aio": {"block_size": 131072, "queue_depth": 2,
                                                                 "thread_count": 3}}))
    code, out, _ = run_main(capsys, "swap", "bench", "--path", str(swap_dir), "--size", "2MiB", "--repeat", "1",
                            "--config", str(config), "--queue-depth", "5")
    assert code == 0
    assert "backend threads: block_size 131072, queue_depth 5, intra_op_parallelism 3" in out
    assert "raw O_DIRECT (1 thread, 8 MiB blocks)" in out and "backend / raw" in out


def test_bench_sweep_prints_an_aio_block(capsys: pytest.CaptureFixture[str], swap_dir: Path) -> None:
    code, out, _ = run_main(capsys, "swap", "bench", "--path", str(swap_dir), "--size", "2MiB", "--sweep",
                            "--block-sizes", "64K,1M", "--queue-depths", "1,4", "--thread-counts", "1", "--json")
    data = json.loads(out)
    assert code == 0 and len(data["trials"]) == 4
    assert data["best"] == max(data["trials"], key=lambda trial: trial["write_read_gbps"])
    assert data["aio"] == {"block_size": data["best"]["block_size"], "queue_depth": data["best"]["queue_depth"],
                           "intra_op_parallelism": 1, "single_submit": False, "overlap_events": True}
    assert {trial["block_size"] for trial in data["trials"]} == {65536, 2**20}
    code, out, _ = run_main(capsys, "swap", "bench", "--path", str(swap_dir), "--size", "1MiB", "--sweep",
                            "--block-sizes", "1M", "--queue-depths", "2", "--thread-counts", "1")
    assert code == 0 and '"aio": {' in out and "for the ds_config:" in out
    assert os.listdir(swap_dir) == []


@pytest.mark.parametrize(("argv", "message"), [
    (("--size", "lots"), "--size: 'lots' is not a byte count; write e.g. 1GiB, 512MiB, 1M or 4096"),
    (("--size", "1000"), "--size 1000: must be a multiple of 4096 bytes (O_DIRECT)"),
    (("--queue-depth", "0"), "--queue-depth: '0' is not a positive integer"),
    (("--block-size", "1000"), "block size 1000: must be a multiple of 4096 bytes (O_DIRECT)"),
    (("--sweep", "--queue-depths", "1,x"), "--queue-depths: 'x' is not a positive integer; write e.g. 1,2,4"),
    (("--config", "/nonexistent/ds.json"), "config file /nonexistent/ds.json: not found"),
    (("--sweep", "--block-size", "1M"), "--sweep tries lists of settings: use --block-sizes, --queue-depths and "
                                        "--thread-counts instead of --block-size"),
    (("--queue-depths", "1,2"), "--queue-depths only apply with --sweep"),
])
def test_bench_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], swap_dir: Path, argv: tuple[str, ...],
                                     message: str) -> None:
    err = _one_error_line(*run_main(capsys, "swap", "bench", "--path", str(swap_dir), *argv))
    assert message in err
    assert os.listdir(swap_dir) == []


def test_bench_needs_an_existing_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = _one_error_line(*run_main(capsys, "swap", "bench"))
    assert "zero swap bench needs --path DIR" in err
    err = _one_error_line(*run_main(capsys, "swap", "bench", "--path", str(tmp_path / "absent")))
    assert f"--path {tmp_path / 'absent'}: not a directory" in err


def test_bench_refuses_a_directory_that_takes_no_file_before_writing(capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # A read-only directory (as a user, or on a read-only mount even as root): the probe file is refused.
    def refuse(**kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    err = _one_error_line(*run_main(capsys, "swap", "bench", "--path", str(tmp_path), "--size", "1MiB"))
    assert err == (f"zero: error: --path {tmp_path}: cannot create a file in {tmp_path} (Permission denied); "
                   "pass a path in a directory you can write to\n")
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only directory")
def test_bench_on_a_read_only_directory_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    tmp_path.chmod(0o555)
    try:
        err = _one_error_line(*run_main(capsys, "swap", "bench", "--path", str(tmp_path), "--size", "1MiB"))
    finally:
        tmp_path.chmod(0o755)
    assert err.startswith(f"zero: error: --path {tmp_path}: cannot create a file in {tmp_path} (Permission denied)")


def test_bench_refuses_a_size_the_disk_cannot_hold(capsys: pytest.CaptureFixture[str], swap_dir: Path) -> None:
    err = _one_error_line(*run_main(capsys, "swap", "bench", "--path", str(swap_dir), "--size", "1000TiB"))
    assert "the bench writes 2 file(s) of 1024000.00 GiB but only " in err and "pass a smaller --size" in err


@pytest.mark.skipif(not shm_is_tmpfs(), reason="/dev/shm is not tmpfs here")
def test_bench_on_tmpfs_names_the_buffered_mode(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = _one_error_line(*run_main(capsys, "swap", "bench", "--path", "/dev/shm", "--size", "1MiB"))
    assert "/dev/shm is on tmpfs" in err and "ZERO_SWAP_BUFFERED=1" in err
    code, out, _ = run_main(capsys, "swap", "bench", "--path", "/dev/shm", "--size", "1MiB", "--repeat", "1",
                            "--buffered", "--json")
    assert code == 0 and json.loads(out)["mode"] == "buffered"
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(f"zero-swap-bench-{os.getpid()}")]
