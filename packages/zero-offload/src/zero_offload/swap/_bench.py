"""`zero swap bench`: a swap backend's bandwidth against the raw O_DIRECT bandwidth of the same disk.

Both are measured in one run, on files in the same directory, from the same page-aligned
buffer, in alternating order (raw first in odd rounds, the backend first in even ones) so
that a disk whose speed drifts favours neither; the figures are medians over the rounds.

- raw: one thread, sequential 8 MiB O_DIRECT pwrite into a new file (created and truncated,
  as `dd if=/dev/zero of=F bs=8M oflag=direct`), then sequential 8 MiB O_DIRECT reads of it
  (`dd if=F of=/dev/null bs=8M iflag=direct`).
- backend: the selected backend writes the buffer to a new file and reads it back, with the
  aio settings given, one request per buffer of up to 1 GiB, all submitted before the first
  wait. Every read is checked against what was written, outside the timed part.
- sweep: the backend alone for each block size x queue depth x threads, once each, between
  two raw measurements; the best (least time to write and read the size) is printed as the
  `aio` block to paste into a ds_config.
"""
from __future__ import annotations

import errno
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import torch
from zero_plugins.ds_config import AioConfig
from zero_plugins import check_writable_directory

from ._buffers import ALIGNMENT, aligned_empty, byte_view
from ._direct import O_DIRECT, check_direct_io, filesystem_type
from ._errors import SwapError, SwapIOError
from ._links import NO_FOLLOW, link_refusal, what_is_there
from ._select import get_swap_backend
from ._units import format_bytes

RAW_BLOCK = 8 * 2**20
MAX_BUFFER = 2**30
DEFAULT_SWEEP = {
    "block_size": [128 * 2**10, 2**20, 4 * 2**20, 8 * 2**20],
    "queue_depth": [1, 4, 8, 16, 32],
    "intra_op_parallelism": [1, 2],
}

Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    print(f"zero swap bench: {message}", file=sys.stderr, flush=True)


class _Files:
    """The bench's two files in the directory; removed on exit, whatever happens."""

    def __init__(self, directory: str) -> None:
        stem = os.path.join(directory, f"zero-swap-bench-{os.getpid()}")
        self.raw, self.backend = f"{stem}-raw.bin", f"{stem}-backend.bin"
        for path in (self.raw, self.backend):  # the bench removes its files: none may be someone else's
            found = what_is_there(path)
            if found is not None:
                raise SwapError(f"--path: {path} already exists (a {found}); zero swap bench writes and removes files "
                                "of that name, so remove it or pass another --path")

    def remove(self, *paths: str) -> None:
        for path in paths or (self.raw, self.backend):
            if what_is_there(path) == "file":  # a link put there meanwhile is not ours to remove
                os.unlink(path)

    def __enter__(self) -> _Files:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def check_bench_path(directory: str, size: int, files: int, buffered: bool) -> str:
    """The directory, checked: it exists, takes new files, does O_DIRECT (unless buffered) and has room;
    its file system type."""
    if not os.path.isdir(directory):
        raise SwapError(f"--path {directory}: not a directory; create it on the disk to measure")
    check_writable_directory(directory, "--path")  # the bench's files go there: a read-only one fails now
    if size % ALIGNMENT:
        raise SwapError(f"--size {size}: must be a multiple of {ALIGNMENT} bytes (O_DIRECT)")
    if not buffered:
        check_direct_io(directory)
    stat = os.statvfs(directory)
    free = stat.f_bavail * stat.f_frsize
    needed = files * size + 64 * 2**20
    if needed > free:
        raise SwapError(f"--path {directory}: the bench writes {files} file(s) of {format_bytes(size)} but only "
                        f"{format_bytes(free)} is free there; pass a smaller --size")
    return filesystem_type(directory) or "unknown"


class _Buffer:
    """The page-aligned source and destination of every transfer, filled with a checkable pattern:
    4 KiB of pseudo-random bytes per block, the first 8 of them replaced by the block's index."""

    def __init__(self, nbytes: int) -> None:
        self.tensor = aligned_empty(nbytes)
        self.view = byte_view(self.tensor)
        generator = torch.Generator().manual_seed(20240531)
        tile = torch.randint(0, 256, (ALIGNMENT,), dtype=torch.uint8, generator=generator)
        self._tile = tile.view(torch.int64)  # compared as int64: 8 times fewer elements
        self._blocks = self.tensor.view(torch.int64).view(-1, ALIGNMENT // 8)
        self._index = torch.arange(self._blocks.shape[0])
        self.fill()

    def fill(self) -> None:
        self._blocks[:] = self._tile
        self._blocks[:, 0] = self._index

    def check(self, what: str) -> None:
        rows = self._blocks.shape[0]
        if not (torch.equal(self._blocks[:, 0], self._index)
                and torch.equal(self._blocks[:, 1:], self._tile[1:].expand(rows, -1))):
            raise SwapError(f"{what}: the data read back differs from what was written")


def _raw(path: str, buffer: _Buffer, size: int, write: bool, buffered: bool) -> _Timing:
    """Seconds (wall, CPU) for one thread to write (or read) `size` bytes sequentially in 8 MiB O_DIRECT blocks."""
    flags = (os.O_WRONLY | os.O_CREAT | os.O_TRUNC if write else os.O_RDONLY) | (0 if buffered else O_DIRECT)
    flags |= NO_FOLLOW
    view, length = buffer.view, len(buffer.view)
    started, cpu = time.perf_counter(), time.process_time()
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as error:
        raise (link_refusal(path) if error.errno == errno.ELOOP else
               SwapIOError(path, "open", f"{error.strerror} [errno {error.errno}]", error.errno)) from None
    try:
        offset = 0
        while offset < size:
            start = offset % length
            block = view[start:start + min(RAW_BLOCK, length - start, size - offset)]
            try:
                moved = os.pwrite(fd, block, offset) if write else os.preadv(fd, [block], offset)
            except OSError as error:
                call = f"os.{'pwrite' if write else 'preadv'}({len(block)} bytes at offset {offset})"
                raise SwapIOError(path, call, f"{error.strerror} [errno {error.errno}]", error.errno) from None
            if moved <= 0:
                raise SwapIOError(path, f"raw {'write' if write else 'read'} at offset {offset}", "moved no bytes")
            offset += moved
    finally:
        os.close(fd)
    return _Timing(time.perf_counter() - started, time.process_time() - cpu)


def _through_backend(backend: Any, path: str, buffer: _Buffer, size: int, write: bool) -> _Timing:
    """Seconds (wall, CPU of the whole process) for the backend to write (or read) `size` bytes:
    one request per buffer-sized piece."""
    length = buffer.tensor.numel()
    started, cpu = time.perf_counter(), time.process_time()
    handles = []
    for offset in range(0, size, length):
        piece = buffer.tensor[:min(length, size - offset)]
        handles.append(backend.write_async(piece, path, offset) if write else backend.read_async(piece, path, offset))
    for handle in handles:
        handle.wait()
    return _Timing(time.perf_counter() - started, time.process_time() - cpu)


class _Timing(NamedTuple):
    seconds: float
    cpu_seconds: float


def _rate(size: int, seconds: float) -> float:
    return size / seconds / 1e9


def _settings(aio: AioConfig) -> dict[str, int]:
    return {"block_size": aio.block_size, "queue_depth": aio.queue_depth,
            "intra_op_parallelism": aio.intra_op_parallelism}


def bench(directory: str, size: int, aio: AioConfig, *, repeat: int, buffered: bool,
          progress: Progress = stderr_progress) -> dict[str, Any]:
    """Write and read `size` bytes `repeat` times, raw and through the selected backend; GB/s and ratios."""
    fstype = check_bench_path(directory, size, 2, buffered)
    samples: dict[str, list[float]] = {"raw_write": [], "raw_read": [], "backend_write": [], "backend_read": []}
    cpu: dict[str, list[float]] = {key: [] for key in samples}

    def record(key: str, timing: _Timing) -> None:
        samples[key].append(_rate(size, timing.seconds))
        cpu[key].append(timing.cpu_seconds / (size / 2**30))

    with get_swap_backend(aio, buffered=buffered) as backend, _Files(directory) as files:
        progress(f"{format_bytes(size)} in {directory} ({fstype}), {repeat} round(s); backend {backend.name}: "
                 f"{backend.describe()}")
        buffer = _Buffer(min(size, MAX_BUFFER))

        def raw_write() -> None:
            files.remove(files.raw)
            record("raw_write", _raw(files.raw, buffer, size, True, buffered))

        def raw_read() -> None:
            record("raw_read", _raw(files.raw, buffer, size, False, buffered))

        def backend_write() -> None:
            files.remove(files.backend)
            record("backend_write", _through_backend(backend, files.backend, buffer, size, True))

        def backend_read() -> None:
            buffer.tensor.zero_()
            record("backend_read", _through_backend(backend, files.backend, buffer, size, False))
            buffer.check(f"{backend.name} read of {files.backend}")
            buffer.fill()

        for round_ in range(repeat):
            steps = ([raw_write, backend_write, raw_read, backend_read] if round_ % 2 == 0
                     else [backend_write, raw_write, backend_read, raw_read])
            for step in steps:
                step()
            progress(f"round {round_ + 1}/{repeat}: " + ", ".join(
                f"{key.replace('_', ' ')} {values[-1]:.2f} GB/s" for key, values in samples.items()))
        name = backend.name
        settings = _settings(backend.aio)
        mode = "buffered" if backend.buffered else "O_DIRECT"
    medians = {key: statistics.median(values) for key, values in samples.items()}
    return {
        "path": directory, "filesystem": fstype, "size": size, "rounds": repeat, "mode": mode,
        "backend": name, "aio": settings,
        "raw": {"threads": 1, "block_size": RAW_BLOCK, "write_gbps": round(medians["raw_write"], 3),
                "read_gbps": round(medians["raw_read"], 3)},
        "write_gbps": round(medians["backend_write"], 3), "read_gbps": round(medians["backend_read"], 3),
        "write_ratio": round(medians["backend_write"] / medians["raw_write"], 3),
        "read_ratio": round(medians["backend_read"] / medians["raw_read"], 3),
        "samples_gbps": {key: [round(value, 3) for value in values] for key, values in samples.items()},
        # CPU time of the whole process per GiB moved (median): what the I/O costs the host.
        "cpu_seconds_per_gib": {key: round(statistics.median(values), 3) for key, values in cpu.items()},
    }


def sweep(directory: str, size: int, grid: Mapping[str, Sequence[int]], *, buffered: bool,
          progress: Progress = stderr_progress) -> dict[str, Any]:
    """The backend at every block size x queue depth x threads, between two raw measurements; the best as an aio block."""
    fstype = check_bench_path(directory, size, 2, buffered)
    configs = [AioConfig(block_size=block, queue_depth=depth, intra_op_parallelism=threads)
               for block in grid["block_size"] for depth in grid["queue_depth"]
               for threads in grid["intra_op_parallelism"]]
    raw: dict[str, list[float]] = {"write": [], "read": []}
    trials: list[dict[str, Any]] = []
    name = ""
    with _Files(directory) as files:
        buffer = _Buffer(min(size, MAX_BUFFER))

        def measure_raw(when: str) -> None:
            files.remove(files.raw)
            raw["write"].append(_rate(size, _raw(files.raw, buffer, size, True, buffered).seconds))
            raw["read"].append(_rate(size, _raw(files.raw, buffer, size, False, buffered).seconds))
            files.remove(files.raw)
            progress(f"raw O_DIRECT ({when}): write {raw['write'][-1]:.2f} GB/s, read {raw['read'][-1]:.2f} GB/s")

        get_swap_backend(configs[0], buffered=buffered).close()  # an unusable backend fails before anything runs
        measure_raw("before")
        progress(f"{len(configs)} settings, {format_bytes(size)} each, in {directory} ({fstype})")
        for index, aio in enumerate(configs):
            with get_swap_backend(aio, buffered=buffered) as backend:
                name = backend.name
                files.remove(files.backend)
                write = _through_backend(backend, files.backend, buffer, size, True).seconds
                buffer.tensor.zero_()
                read = _through_backend(backend, files.backend, buffer, size, False).seconds
                buffer.check(f"{backend.name} read of {files.backend}")
                buffer.fill()
            trial = {**_settings(aio), "write_gbps": round(_rate(size, write), 3),
                     "read_gbps": round(_rate(size, read), 3), "write_read_gbps": round(_rate(2 * size, write + read), 3)}
            trials.append(trial)
            progress(f"{index + 1}/{len(configs)}: block {format_bytes(aio.block_size)}, queue depth {aio.queue_depth}, "
                     f"{aio.intra_op_parallelism} thread(s): write {trial['write_gbps']:.2f} GB/s, "
                     f"read {trial['read_gbps']:.2f} GB/s")
        measure_raw("after")
    trials.sort(key=lambda trial: -trial["write_read_gbps"])
    best = trials[0]
    raw_write, raw_read = statistics.median(raw["write"]), statistics.median(raw["read"])
    raw_both = 2 / (1 / raw_write + 1 / raw_read)
    aio_block = {"block_size": best["block_size"], "queue_depth": best["queue_depth"],
                 "intra_op_parallelism": best["intra_op_parallelism"], "single_submit": False, "overlap_events": True}
    return {
        "path": directory, "filesystem": fstype, "size": size, "backend": name,
        "mode": "buffered" if buffered else "O_DIRECT",
        "raw": {"threads": 1, "block_size": RAW_BLOCK, "write_gbps": round(raw_write, 3), "read_gbps": round(raw_read, 3),
                "write_read_gbps": round(raw_both, 3), "samples_gbps": {k: [round(v, 3) for v in vs] for k, vs in raw.items()}},
        "trials": trials,
        "best": best,
        "best_ratio": round(best["write_read_gbps"] / raw_both, 3),
        "aio": aio_block,
    }
