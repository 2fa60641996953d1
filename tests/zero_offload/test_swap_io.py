"""Swap I/O through the built-in `threads` backend: O_DIRECT round trips, layout in the file,
concurrency, and every error naming what failed and how to proceed.

Sizes are small (KiB to a few MiB) and files live in a directory where O_DIRECT really works.
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from zero_plugins.ds_config import AioConfig, ConfigError
from zero_plugins import PluginError, get_plugin_manager, hookimpl

import zero_offload.swap as swap
from swap_helpers import direct_directory, shm_is_tmpfs
from zero_offload.swap import (
    ALIGNMENT,
    DirectIOUnsupportedError,
    SwapBackend,
    SwapError,
    SwapIOError,
    UnalignedBufferError,
    aligned_empty,
    get_swap_backend,
    padded_nbytes,
)
from zero_offload.swap._threads import ThreadsBackend


@pytest.fixture(autouse=True)
def default_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZERO_SWAP_BACKEND", raising=False)
    monkeypatch.delenv("ZERO_SWAP_BUFFERED", raising=False)


@pytest.fixture
def swap_dir(tmp_path: Path) -> Iterator[Path]:
    yield from direct_directory(tmp_path)


def _uring_missing() -> str | None:
    from zero_offload.swap._uring import IoUringBackend

    available, reason = IoUringBackend.available()
    return None if available else reason


BACKENDS = ["threads", pytest.param("io_uring", marks=pytest.mark.skipif(bool(_uring_missing()),
                                                                       reason=f"io_uring: {_uring_missing()}"))]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[SwapBackend]:
    # Small blocks so that even these small tensors are split into several requests in flight.
    with get_swap_backend(AioConfig(block_size=8192, queue_depth=4, intra_op_parallelism=2), name=request.param) as made:
        yield made


def _filled(numel: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    tensor = aligned_empty(numel, dtype)
    if dtype == torch.bool:
        tensor.copy_(torch.randint(0, 2, (numel,), generator=generator).bool())
    elif dtype.is_floating_point:
        tensor.copy_(torch.randn(numel, generator=generator).to(dtype))
    else:
        tensor.copy_(torch.randint(-100, 100, (numel,), generator=generator).to(dtype))
    return tensor


def test_the_default_backend_is_threads_with_the_aio_settings() -> None:
    with get_swap_backend() as made:
        assert type(made) is ThreadsBackend and made.name == "threads"
        assert made.aio == AioConfig() and made.threads == 8  # 1 thread x queue depth 8 in flight
        assert not made.buffered
        assert made.describe() == "block 1.00 MiB, queue depth 8, 1 thread(s), O_DIRECT"
    assert swap.selected_name() == "threads"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.int64, torch.bool])
@pytest.mark.parametrize("numel", [1, 1023, 4096, 12289, 70001])
def test_round_trip_of_dtypes_and_odd_sizes(backend: SwapBackend, swap_dir: Path, dtype: torch.dtype, numel: int) -> None:
    source = _filled(numel, dtype)
    path = str(swap_dir / "t.swp")
    assert backend.write(source, path) == source.numel() * source.element_size()
    nbytes = source.numel() * source.element_size()
    # The file holds the tensor padded to the alignment, the padding zeros.
    assert os.path.getsize(path) == padded_nbytes(nbytes)
    with open(path, "rb") as written:
        data = written.read()
    assert data[nbytes:] == bytes(padded_nbytes(nbytes) - nbytes)
    target = aligned_empty(numel, dtype)
    target.zero_()
    assert backend.read(target, path) == nbytes
    assert torch.equal(target, source)


def test_tensors_at_offsets_in_one_file(backend: SwapBackend, swap_dir: Path) -> None:
    path = str(swap_dir / "packed.swp")
    tensors = [_filled(n, torch.float32, seed=n) for n in (5, 3000, 1024, 20000)]
    offsets, offset = [], 0
    for tensor in tensors:
        offsets.append(offset)
        offset += padded_nbytes(tensor.numel() * 4)
    handles = [backend.write_async(t, path, o) for t, o in zip(tensors, offsets)]
    assert [h.wait() for h in handles] == [t.numel() * 4 for t in tensors]
    assert os.path.getsize(path) == offset
    for tensor, at in reversed(list(zip(tensors, offsets))):
        back = aligned_empty(tensor.numel(), torch.float32)
        backend.read(back, path, at)
        assert torch.equal(back, tensor)
    # Rewriting one in place leaves its neighbours as they were.
    replacement = _filled(3000, torch.float32, seed=99)
    backend.write(replacement, path, offsets[1])
    for expected, at in ((tensors[0], offsets[0]), (replacement, offsets[1]), (tensors[2], offsets[2])):
        back = aligned_empty(expected.numel(), torch.float32)
        backend.read(back, path, at)
        assert torch.equal(back, expected)


def test_a_read_never_writes_past_the_tensor(backend: SwapBackend, swap_dir: Path) -> None:
    # Two slices of one aligned buffer: reading the first, of an odd length, must leave the second intact.
    path = str(swap_dir / "odd.swp")
    backend.write(_filled(4097, torch.uint8), path)
    buffer = aligned_empty(3 * ALIGNMENT)
    buffer.fill_(0xAB)
    first = buffer[:4097]
    backend.read(first, path)
    assert torch.equal(first, _filled(4097, torch.uint8))
    assert bool((buffer[4097:] == 0xAB).all())


@pytest.mark.parametrize("name", BACKENDS)
def test_many_requests_in_flight_from_many_threads(swap_dir: Path, name: str) -> None:
    aio = AioConfig(block_size=4096, queue_depth=3, intra_op_parallelism=2)
    with get_swap_backend(aio, name=name) as made:
        tensors = [_filled(2000 + 37 * i, torch.float32, seed=i) for i in range(24)]
        paths = [str(swap_dir / f"f{i % 3}.swp") for i in range(24)]
        offsets = [(i // 3) * padded_nbytes(4 * 4000) for i in range(24)]
        errors: list[BaseException] = []

        def write(indices: range) -> None:
            try:
                handles = [made.write_async(tensors[i], paths[i], offsets[i]) for i in indices]
                for handle in handles:
                    handle.wait()
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        workers = [threading.Thread(target=write, args=(range(k, 24, 4),)) for k in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert not errors
        backs = [aligned_empty(t.numel(), torch.float32) for t in tensors]
        handles = [made.read_async(b, p, o) for b, p, o in zip(backs, paths, offsets)]
        for handle in handles:
            handle.wait()
            assert handle.done()
        assert all(torch.equal(b, t) for b, t in zip(backs, tensors))


def test_an_empty_tensor_is_done_at_once(backend: SwapBackend, swap_dir: Path) -> None:
    handle = backend.write_async(aligned_empty(0, torch.float32), str(swap_dir / "empty.swp"))
    assert handle.done() and handle.wait() == 0


def test_aligned_empty_is_aligned_and_padded() -> None:
    for numel, dtype in ((1, torch.float32), (1000, torch.float16), (4096, torch.uint8), (0, torch.int64)):
        tensor = aligned_empty(numel, dtype)
        assert tensor.numel() == numel and tensor.dtype == dtype
        assert tensor.data_ptr() % ALIGNMENT == 0 or numel == 0
        assert tensor.untyped_storage().nbytes() >= padded_nbytes(numel * tensor.element_size())


def test_aligned_empty_pins_with_the_native_backend(monkeypatch: pytest.MonkeyPatch, native_pin_backend) -> None:  # type: ignore[no-untyped-def]
    import zero_pin

    monkeypatch.setenv("DS_PIN_MEMORY_BACKEND", "native")
    tensor = aligned_empty(10_000, torch.float32)
    assert tensor.data_ptr() % os.sysconf("SC_PAGESIZE") == 0
    assert zero_pin.is_pinned(tensor)


def test_an_unaligned_tensor_names_the_fix(backend: SwapBackend, swap_dir: Path) -> None:
    unaligned = aligned_empty(100, torch.uint8)[1:]
    with pytest.raises(UnalignedBufferError) as error:
        backend.write(unaligned, str(swap_dir / "u.swp"))
    message = str(error.value)
    assert "not aligned to 4096 bytes, which O_DIRECT requires" in message
    assert "aligned_empty" in message and "DS_PIN_MEMORY_BACKEND=native" in message and "\n" not in message
    assert not (swap_dir / "u.swp").exists()  # refused before the file is opened


def test_an_unaligned_offset_and_a_strided_tensor_are_refused(backend: SwapBackend, swap_dir: Path) -> None:
    with pytest.raises(UnalignedBufferError, match="file offset 100 must be a non-negative multiple of 4096"):
        backend.write(aligned_empty(10), str(swap_dir / "o.swp"), 100)
    strided = aligned_empty(64, torch.float32).view(8, 8).t()
    with pytest.raises(SwapError, match="needs a contiguous tensor"):
        backend.write(strided, str(swap_dir / "o.swp"))
    with pytest.raises(SwapError, match="dense CPU tensors"):
        backend.write(torch.empty(4, device="meta"), str(swap_dir / "o.swp"))


def test_a_block_size_o_direct_cannot_use_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"aio.block_size: must be a multiple of 4096 bytes for O_DIRECT \(got 1000\)"):
        get_swap_backend(AioConfig(block_size=1000))


def test_an_unknown_backend_lists_the_available_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZERO_SWAP_BACKEND", "io_urign")
    with pytest.raises(PluginError) as error:
        get_swap_backend()
    assert str(error.value) == ("unknown swap backend 'io_urign' (from ZERO_SWAP_BACKEND), did you mean 'io_uring'?; "
                                "available: io_uring (zero-offload), threads (zero-offload)")


class _Plugin:
    def __init__(self, name: str, cls: type) -> None:
        self.name, self.cls = name, cls

    @hookimpl
    def zero_register_swap_backends(self, register):  # type: ignore[no-untyped-def]
        register(self.name, self.cls)


@pytest.fixture
def register_plugin() -> Iterator:  # type: ignore[type-arg]
    manager = get_plugin_manager()
    registered = []

    def register(name: str, cls: type) -> None:
        plugin = _Plugin(name, cls)
        manager.register(plugin, name=f"test-swap-{name}")
        registered.append(plugin)

    yield register
    for plugin in registered:
        manager.unregister(plugin)


class CountingBackend(ThreadsBackend):
    """A third party's backend: the built-in one, counting the requests it is given."""

    requests = 0

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, "counts its requests"

    def write_async(self, tensor, path, offset=0):  # type: ignore[no-untyped-def]
        type(self).requests += 1
        return super().write_async(tensor, path, offset)


class MissingKernelBackend(ThreadsBackend):
    @classmethod
    def available(cls) -> tuple[bool, str]:
        return False, "io_uring_setup failed: Operation not permitted (seccomp)"


def test_a_plugin_backend_is_selected_by_name(monkeypatch: pytest.MonkeyPatch, register_plugin, swap_dir: Path) -> None:  # type: ignore[no-untyped-def]
    register_plugin("counting", CountingBackend)
    monkeypatch.setenv("ZERO_SWAP_BACKEND", "counting")
    with get_swap_backend() as made:
        assert type(made) is CountingBackend and made.name == "counting"
        made.write(aligned_empty(10), str(swap_dir / "c.swp"))
    assert CountingBackend.requests == 1
    rows = {row["name"]: row for row in swap.backend_statuses()}
    assert rows["counting"]["selected"] and rows["counting"]["distribution"] == "registered directly"
    assert rows["threads"]["available"] and not rows["threads"]["selected"]


def test_an_unavailable_backend_says_why_and_never_falls_back(monkeypatch: pytest.MonkeyPatch, register_plugin) -> None:  # type: ignore[no-untyped-def]
    register_plugin("uring", MissingKernelBackend)
    monkeypatch.setenv("ZERO_SWAP_BACKEND", "uring")
    available = "threads (zero-offload)" if _uring_missing() else "io_uring (zero-offload), threads (zero-offload)"
    with pytest.raises(SwapError) as error:
        get_swap_backend()
    assert str(error.value) == ("swap backend 'uring' (from ZERO_SWAP_BACKEND) is not available here: "
                                "io_uring_setup failed: Operation not permitted (seccomp); available: " + available)


def test_a_backend_that_is_not_a_swap_backend_is_refused(register_plugin) -> None:  # type: ignore[no-untyped-def]
    register_plugin("wrong", dict)
    with pytest.raises(PluginError, match="not a subclass of zero_offload.swap._backend.SwapBackend"):
        swap.backend_statuses()


def test_reading_a_missing_or_short_file_names_the_file_and_call(backend: SwapBackend, swap_dir: Path) -> None:
    missing = str(swap_dir / "missing.swp")
    with pytest.raises(SwapIOError) as error:
        backend.read(aligned_empty(10), missing)
    assert error.value.path == missing and error.value.errno == errno.ENOENT
    assert str(error.value) == f"open(O_RDONLY|O_DIRECT) on {missing} failed: No such file or directory [errno 2]"

    short = str(swap_dir / "short.swp")
    backend.write(aligned_empty(3 * ALIGNMENT), short)
    with pytest.raises(SwapIOError) as error:
        backend.read(aligned_empty(10 * ALIGNMENT), short)
    message = str(error.value)
    assert message.startswith(("os.preadv(", "io_uring read(")) and f"on {short} failed: the file ends at byte 12288" in message


def test_a_write_that_cannot_open_its_file_names_the_file_and_call(backend: SwapBackend, swap_dir: Path) -> None:
    # A directory where the file should be: refused even to root, unlike a read-only mode.
    path = swap_dir / "taken.swp"
    path.mkdir()
    with pytest.raises(SwapIOError) as error:
        backend.write(aligned_empty(10), str(path))
    assert str(error.value) == f"open(O_WRONLY|O_CREAT|O_DIRECT) on {path} failed: Is a directory [errno 21]"
    with pytest.raises(SwapIOError, match=r"^open on .*/nowhere/x.swp failed: the directory .*/nowhere does not exist$"):
        backend.write(aligned_empty(10), str(swap_dir / "nowhere" / "x.swp"))


_OVER_THE_LIMIT = r"""
import json, resource, signal, sys
from zero_plugins.ds_config import AioConfig
from zero_offload.swap import SwapIOError, aligned_empty, get_swap_backend
fresh, allocated = sys.argv[1], sys.argv[2]
with open(allocated, "wb") as f:  # allocated before the limit: the failure then comes from the writes themselves
    f.write(bytes(256 * 1024))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal's death
resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
tensor = aligned_empty(256 * 1024)
tensor.fill_(7)
results = []
with get_swap_backend(AioConfig(block_size=16384, queue_depth=1)) as backend:
    for path in (fresh, allocated):
        try:
            backend.write(tensor, path)
            results.append(None)
        except SwapIOError as error:
            results.append({"message": str(error), "errno": error.errno, "call": error.call})
print(json.dumps(results))
"""


@pytest.mark.parametrize("name", BACKENDS)
def test_a_failing_write_names_the_file_and_call(swap_dir: Path, name: str) -> None:
    # A write past RLIMIT_FSIZE fails with EFBIG: in the up-front allocation for a new file,
    # or in the write of the block that crosses the limit for an allocated one.
    fresh, allocated = str(swap_dir / "fresh.swp"), str(swap_dir / "allocated.swp")
    result = subprocess.run([sys.executable, "-c", _OVER_THE_LIMIT, fresh, allocated], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "ZERO_SWAP_BACKEND": name})
    assert result.returncode == 0, result.stderr
    at_allocation, in_a_block = json.loads(result.stdout.strip().splitlines()[-1])
    assert at_allocation["errno"] == in_a_block["errno"] == errno.EFBIG
    assert at_allocation["call"] == "fallocate(262144 bytes at offset 0)"
    assert at_allocation["message"] == (f"fallocate(262144 bytes at offset 0) on {fresh} failed: "
                                        "File too large [errno 27]; nothing was written")
    call = {"threads": "os.pwrite", "io_uring": "io_uring write"}[name] + "(16384 bytes at offset 65536)"
    assert in_a_block["call"] == call
    assert in_a_block["message"] == (f"{call} on {allocated} failed: File too large "
                                     "[errno 27]; the write of 262144 bytes at offset 0 is incomplete")


def test_a_failed_request_raises_at_every_wait(backend: SwapBackend, swap_dir: Path) -> None:
    (swap_dir / "zero.swp").write_bytes(b"")
    handle = backend.read_async(aligned_empty(2 * ALIGNMENT), str(swap_dir / "zero.swp"))
    for _ in range(2):
        with pytest.raises(SwapIOError, match="the file ends at byte 0"):
            handle.wait()
    assert handle.done()


@pytest.mark.skipif(not shm_is_tmpfs(), reason="/dev/shm is not tmpfs here")
def test_a_path_without_o_direct_names_the_buffered_mode(backend: SwapBackend, tmp_path: Path) -> None:
    path = f"/dev/shm/zero-swap-test-{os.getpid()}.swp"
    try:
        with pytest.raises(DirectIOUnsupportedError) as error:
            backend.write(aligned_empty(10), path)
        message = str(error.value)
        assert message.startswith("/dev/shm is on tmpfs, which keeps files in host memory")
        assert "ZERO_SWAP_BUFFERED=1" in message and "\n" not in message
        assert not os.path.exists(path)  # refused before the file was created
    finally:
        if os.path.exists(path):
            os.unlink(path)


@pytest.mark.skipif(not shm_is_tmpfs(), reason="/dev/shm is not tmpfs here")
@pytest.mark.parametrize("how", ["argument", "environment"])
def test_buffered_mode_swaps_where_o_direct_cannot(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    if how == "environment":
        monkeypatch.setenv("ZERO_SWAP_BUFFERED", "1")
    path = f"/dev/shm/zero-swap-test-{os.getpid()}.swp"
    try:
        with get_swap_backend(buffered=True if how == "argument" else None) as made:
            assert made.buffered and made.describe().endswith("buffered")
            source = _filled(5000, torch.float32)
            made.write(source, path)
            back = aligned_empty(5000, torch.float32)
            made.read(back, path)
            assert torch.equal(back, source)
            with pytest.raises(UnalignedBufferError):  # the same contract as with O_DIRECT
                made.write(aligned_empty(10)[1:], path)
    finally:
        if os.path.exists(path):
            os.unlink(path)


def test_wait_with_a_timeout(backend: SwapBackend, swap_dir: Path) -> None:
    handle = backend.write_async(_filled(50_000, torch.float32), str(swap_dir / "w.swp"))
    assert handle.wait(timeout=60) == 200_000


def test_a_worker_that_fails_oddly_fails_the_request_instead_of_hanging(monkeypatch: pytest.MonkeyPatch,
                                                                        swap_dir: Path) -> None:
    def broken_pwrite(fd: int, data: object, offset: int) -> int:
        raise MemoryError("no memory for the call")

    monkeypatch.setattr(os, "pwrite", broken_pwrite)
    with get_swap_backend(name="threads") as made:
        handle = made.write_async(aligned_empty(100), str(swap_dir / "odd.swp"))
        with pytest.raises(SwapIOError, match=r"os.pwrite\(4096 bytes at offset 0\) on .* failed: MemoryError"):
            handle.wait(timeout=60)


@pytest.mark.skipif(bool(_uring_missing()), reason=f"io_uring: {_uring_missing()}")
def test_a_broken_io_uring_ring_fails_its_requests_instead_of_hanging(monkeypatch: pytest.MonkeyPatch,
                                                                      swap_dir: Path) -> None:
    from zero_offload.swap import _uring

    def broken_enter(self: object, wait_for: int) -> None:
        raise OSError(errno.EBADFD, "io_uring_enter: File descriptor in bad state")

    monkeypatch.setattr(_uring._Ring, "enter", broken_enter)
    with get_swap_backend(AioConfig(queue_depth=2), name="io_uring") as made:
        first = made.write_async(aligned_empty(100), str(swap_dir / "a.swp"))
        with pytest.raises(SwapIOError, match=r"io_uring write\(4096 bytes at offset 0\) on .* failed: io_uring_enter"):
            first.wait(timeout=60)
        later = made.write_async(aligned_empty(100), str(swap_dir / "b.swp"))
        with pytest.raises(SwapIOError, match="io_uring"):
            later.wait(timeout=60)
