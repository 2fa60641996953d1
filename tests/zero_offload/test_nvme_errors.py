"""NVMe offload that cannot run fails with one line naming the option, the file or call, and the fix.

At `initialize`:
- too little free space on `nvme_path` (a 1 MiB tmpfs mounted for the test): the bytes needed per
  rank and for the ranks on this host, and the bytes free;
- a path without O_DIRECT (/dev/shm): names ZERO_SWAP_BUFFERED=1, with which the same path trains;
- an unknown ZERO_SWAP_BACKEND: lists the installed backends;
- no `nvme_path`: a ConfigError naming `zero_optimization.offload_optimizer.nvme_path`.
At the first step:
- `buffer_count` below what Adam swaps per sub-group: names buffer_count and "at least 3";
- a swap write that fails (RLIMIT_FSIZE lowered after initialize, in a subprocess): the step names
  the .swp file and the system call, and every later step refuses to go on from half-written files.
  Both ways a write fails are covered: allocating a new state file (the first step) and writing
  an existing one (a step after a good one).
"""
from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import zero_core
from swap_helpers import direct_directory, shm_is_tmpfs
from zero_plugins.ds_config import ConfigError
from zero_offload.swap import DirectIOUnsupportedError
from zero_plugins import PluginError

pytestmark = pytest.mark.usefixtures("solo_process_group")


@pytest.fixture(autouse=True)
def default_swap_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ZERO_SWAP_BACKEND", "ZERO_SWAP_BUFFERED", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def _config(**block: Any) -> dict[str, Any]:
    nvme = {"device": "nvme", "buffer_count": 4, "pipeline_read": False, "pipeline_write": False, **block}
    return {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": {"stage": 2, "offload_optimizer": nvme}}


def _engine(features: int, outputs: int = 0, **block: Any) -> Any:
    model = torch.nn.Linear(features, outputs or features, bias=False)
    return zero_core.initialize(model=model, config=_config(**block))[0]


def _step(engine: Any, features: int) -> None:
    engine.backward(engine(torch.randn(2, features)).pow(2).mean())
    engine.step()


def _left(root: Path) -> list[str]:
    gc.collect()  # a failed initialize's devices go with the traceback that held them
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    if shutil.which("mount") is None or shutil.which("umount") is None:
        pytest.skip("no mount/umount command to make a 1 MiB tmpfs")
    mount = tmp_path / "small"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a 1 MiB tmpfs here (needs root or CAP_SYS_ADMIN): {result.stderr.strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.parametrize(("features", "outputs", "ranks", "per_rank", "needed"), [
    (512, 256, 1, "1.50 MiB", "1.50 MiB"),  # one rank that does not fit alone
    (256, 256, 2, "768.00 KiB", "1.50 MiB"),  # two ranks that fit one by one, not together
])
def test_too_little_disk_space_names_both_numbers(small_tmpfs: Path, monkeypatch: pytest.MonkeyPatch, features: int,
                                                   outputs: int, ranks: int, per_rank: str, needed: str) -> None:
    monkeypatch.setenv("ZERO_SWAP_BUFFERED", "1")  # tmpfs refuses O_DIRECT; the space check is what is tested
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(ranks))
    with pytest.raises(ConfigError) as error:
        _engine(features, outputs, nvme_path=str(small_tmpfs))  # 12 B of swap per trainable element
    assert str(error.value) == (
        f"zero_optimization.offload_optimizer.nvme_path: swapping needs {per_rank} of disk per rank, {needed} for the "
        f"{ranks} rank(s) on this host, but {small_tmpfs} has 1020.00 KiB free besides the 4.00 KiB this run has "
        "written; free space there, point nvme_path at a larger drive, or use fewer ranks per node")  # 4 KiB: the
    # rank's lock file, which holds the marker that stale-run cleanup checks (one tmpfs page)
    del error
    assert _left(small_tmpfs) == []


@pytest.mark.skipif(not shm_is_tmpfs(), reason="/dev/shm is not tmpfs here")
def test_a_path_without_o_direct_names_buffered_mode_which_then_trains(monkeypatch: pytest.MonkeyPatch) -> None:
    root = Path("/dev/shm") / f"zero-nvme-test-{uuid.uuid4().hex[:8]}"
    try:
        with pytest.raises(DirectIOUnsupportedError) as error:
            _engine(16, nvme_path=str(root))
        message = str(error.value)
        assert message.startswith(f"{root} is on tmpfs, which keeps files in host memory: O_DIRECT there never "
                                  "reaches a disk, so swapping to it would use RAM; ")
        assert "set ZERO_SWAP_BUFFERED=1 to swap through the page cache without O_DIRECT" in message
        assert "\n" not in message
        del error
        assert _left(root) == []

        monkeypatch.setenv("ZERO_SWAP_BUFFERED", "1")
        engine = _engine(16, nvme_path=str(root))
        for _ in range(2):
            _step(engine, 16)
        assert any(name.endswith(".exp_avg_sq.swp") for name in _left(root))
        engine.destroy()
        assert _left(root) == []
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_an_unknown_swap_backend_lists_the_installed_ones(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ZERO_SWAP_BACKEND", "nope")
    for root in direct_directory(tmp_path):
        with pytest.raises(PluginError) as error:
            _engine(8, nvme_path=str(root))
        assert str(error.value) == ("unknown swap backend 'nope' (from ZERO_SWAP_BACKEND); "
                                    "available: io_uring (zero-offload), threads (zero-offload)")
        del error
        assert _left(root) == []


def test_nvme_without_nvme_path_names_the_option() -> None:
    with pytest.raises(ConfigError) as error:
        _engine(8)
    assert str(error.value) == ('zero_optimization.offload_optimizer.nvme_path: is required when device is "nvme"; '
                                "set it to a directory on the NVMe drive")


def test_too_few_buffers_for_adam_fail_the_first_step_naming_buffer_count(tmp_path: Path) -> None:
    for root in direct_directory(tmp_path):
        engine = _engine(16, nvme_path=str(root), buffer_count=2)  # Adam swaps master, exp_avg, exp_avg_sq
        with pytest.raises(ConfigError) as error:
            _step(engine, 16)
        assert str(error.value) == (
            "zero_optimization.offload_optimizer.buffer_count: is 2, but the optimizer's step swaps 3 tensors per "
            "sub-group (the fp32 master and 2 state tensor(s)): set it to at least 3")
        engine.destroy()


# Runs in a fresh interpreter. Per backend: one engine steps once, a second is only initialized; then
# RLIMIT_FSIZE drops to 8 KiB (SIGXFSZ ignored, so writes fail with EFBIG) and both step three times.
# A tensor is 4096 fp32 = 16 KiB: the stepped engine's master write stops at 8 KiB, the fresh engine's
# new state file cannot be allocated.
CHILD = r"""
import json, os, resource, signal, sys, torch, zero_core
from zero_offload.swap._uring import IoUringBackend
root = sys.argv[1]
config = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": root,
                                "buffer_count": 4, "pipeline_read": False, "pipeline_write": False}}}
def step(engine):
    engine.backward(engine(torch.randn(2, 64)).pow(2).mean())
    engine.step()
def attempt(engine):
    try:
        step(engine)
        return "stepped"
    except Exception as error:
        return f"{type(error).__name__}: {error}"
def runs():
    return {name for name in os.listdir(root) if name.startswith("zero-run-")}
engines, out = {}, {}
for backend in ("threads", "io_uring") if IoUringBackend.available()[0] else ("threads",):
    os.environ["ZERO_SWAP_BACKEND"] = backend
    for kind in ("stepped", "fresh"):
        before = runs()
        engines[backend, kind] = zero_core.initialize(model=torch.nn.Linear(64, 64, bias=False), config=config)[0]
        (run,) = runs() - before
        out[f"{backend}.{kind}"] = {"run": os.path.join(root, run)}
        if kind == "stepped":
            step(engines[backend, kind])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (8192, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
for (backend, kind), engine in engines.items():
    out[f"{backend}.{kind}"]["errors"] = [attempt(engine) for _ in range(3)]
    engine.destroy()
out["left"] = sorted(os.listdir(root))
print(json.dumps(out))
"""


def test_a_failing_write_names_file_and_call_and_no_step_goes_on_after_it(tmp_path: Path) -> None:
    for root in direct_directory(tmp_path):
        result = subprocess.run([sys.executable, "-c", CHILD, str(root)], capture_output=True, text=True, timeout=120,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout.strip().splitlines()[-1])
        assert out.pop("left") == []  # destroy() removes the files of a run that failed, too
        calls = {"threads": "os.pwrite", "io_uring": "io_uring write"}
        for name, case in out.items():
            backend, kind = name.split(".")
            rank = f"{case['run']}/rank0"
            if kind == "fresh":  # the first step allocates exp_avg's file: EFBIG before a byte is written
                first = (f"SwapIOError: fallocate(16384 bytes at offset 0) on {rank}/optim.state/"
                         "group0.bucket0.sub0.exp_avg.swp failed: File too large [errno 27]; nothing was written")
            else:  # the master's file exists: its write stops at the limit
                first = (f"SwapIOError: {calls[backend]}(8192 bytes at offset 8192) on {rank}/optim.master/"
                         "group0.bucket0.sub0.swp failed: File too large [errno 27]; the write of 16384 bytes at "
                         "offset 0 is incomplete")
            # the engine refuses to go on from a step that failed once it had begun (docs/reliability.md)
            step = 1 if kind == "fresh" else 2
            refused = (f"HalfAppliedStep: engine.forward() refused: step {step} failed after it had updated some "
                       f"parameters ({first}), so the weights are no step's weights and the step "
                       "was not counted; training on or saving them is refused. Load the last checkpoint with "
                       "engine.load_checkpoint(...) to go on")
            assert case["errors"] == [first, refused, refused], name
