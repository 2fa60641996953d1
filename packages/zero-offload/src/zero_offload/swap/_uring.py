"""The optional `io_uring` backend: O_DIRECT reads and writes through io_uring rings, by raw
system calls from ctypes (no liburing, nothing to compile).

Each of intra_op_parallelism threads owns a ring of queue_depth entries and keeps up to
queue_depth blocks in flight on it: it fills submission entries, submits them and waits for
completions in one io_uring_enter call (ctypes releases the GIL for the call), then posts the
completed blocks. Blocks come from one FIFO queue shared by the threads, as in `threads`.

The rings are shared memory with the kernel. Python cannot issue memory barriers, so the
backend relies on x86-64's ordering (stores are seen in order, loads are not reordered with
loads) and is unavailable on other architectures. available() also creates a ring, so a
kernel without io_uring, or a seccomp profile or kernel.io_uring_disabled that forbids it,
gives the reason instead of an error later.
"""
from __future__ import annotations

import ctypes
import errno as errno_codes
import mmap
import os
import platform
import queue
import threading
from typing import Any

from ._errors import SwapError
from ._requests import Block
from ._workers import QueuedBackend, WorkerQueue

_SYS_SETUP, _SYS_ENTER = 425, 426  # the same numbers on every architecture since Linux 5.1
_OFF_SQ_RING, _OFF_CQ_RING, _OFF_SQES = 0, 0x8000000, 0x10000000
_FEAT_SINGLE_MMAP = 1
_ENTER_GETEVENTS = 1
_OP_READ, _OP_WRITE = 22, 23  # IORING_OP_READ / IORING_OP_WRITE, Linux 5.6+


class _SqOffsets(ctypes.Structure):
    _fields_ = [("head", ctypes.c_uint32), ("tail", ctypes.c_uint32), ("ring_mask", ctypes.c_uint32),
                ("ring_entries", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("dropped", ctypes.c_uint32),
                ("array", ctypes.c_uint32), ("resv1", ctypes.c_uint32), ("user_addr", ctypes.c_uint64)]


class _CqOffsets(ctypes.Structure):
    _fields_ = [("head", ctypes.c_uint32), ("tail", ctypes.c_uint32), ("ring_mask", ctypes.c_uint32),
                ("ring_entries", ctypes.c_uint32), ("overflow", ctypes.c_uint32), ("cqes", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("resv1", ctypes.c_uint32), ("user_addr", ctypes.c_uint64)]


class _Params(ctypes.Structure):
    _fields_ = [("sq_entries", ctypes.c_uint32), ("cq_entries", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("sq_thread_cpu", ctypes.c_uint32), ("sq_thread_idle", ctypes.c_uint32), ("features", ctypes.c_uint32),
                ("wq_fd", ctypes.c_uint32), ("resv", ctypes.c_uint32 * 3), ("sq_off", _SqOffsets),
                ("cq_off", _CqOffsets)]


class _Sqe(ctypes.Structure):
    _fields_ = [("opcode", ctypes.c_uint8), ("flags", ctypes.c_uint8), ("ioprio", ctypes.c_uint16),
                ("fd", ctypes.c_int32), ("off", ctypes.c_uint64), ("addr", ctypes.c_uint64), ("len", ctypes.c_uint32),
                ("rw_flags", ctypes.c_uint32), ("user_data", ctypes.c_uint64), ("pad", ctypes.c_uint64 * 3)]


class _Cqe(ctypes.Structure):
    _fields_ = [("user_data", ctypes.c_uint64), ("res", ctypes.c_int32), ("flags", ctypes.c_uint32)]


assert ctypes.sizeof(_Params) == 120 and ctypes.sizeof(_Sqe) == 64 and ctypes.sizeof(_Cqe) == 16

_libc: Any = None


def _lib() -> Any:
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc = libc
    return _libc


def _setup(entries: int, params: _Params) -> int:
    fd = int(_lib().syscall(ctypes.c_long(_SYS_SETUP), ctypes.c_long(entries), ctypes.byref(params)))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return fd


class _Ring:
    """One io_uring instance: its submission and completion rings mapped into this process."""

    def __init__(self, entries: int) -> None:
        params = _Params()
        self.fd = _setup(entries, params)
        self._maps: list[tuple[int, int]] = []
        try:
            sq, cq = params.sq_off, params.cq_off
            sq_size = sq.array + params.sq_entries * 4
            cq_size = cq.cqes + params.cq_entries * ctypes.sizeof(_Cqe)
            if params.features & _FEAT_SINGLE_MMAP:
                sq_size = cq_size = max(sq_size, cq_size)
            sq_base = self._map(sq_size, _OFF_SQ_RING)
            cq_base = sq_base if params.features & _FEAT_SINGLE_MMAP else self._map(cq_size, _OFF_CQ_RING)
            sqes = self._map(params.sq_entries * ctypes.sizeof(_Sqe), _OFF_SQES)
        except BaseException:
            self.close()
            raise
        self.sq_entries = params.sq_entries
        self.sq_head = ctypes.c_uint32.from_address(sq_base + sq.head)
        self.sq_tail = ctypes.c_uint32.from_address(sq_base + sq.tail)
        self.sq_mask = ctypes.c_uint32.from_address(sq_base + sq.ring_mask).value
        self.sq_array = (ctypes.c_uint32 * params.sq_entries).from_address(sq_base + sq.array)
        self.sqes = (_Sqe * params.sq_entries).from_address(sqes)
        self.cq_head = ctypes.c_uint32.from_address(cq_base + cq.head)
        self.cq_tail = ctypes.c_uint32.from_address(cq_base + cq.tail)
        self.cq_mask = ctypes.c_uint32.from_address(cq_base + cq.ring_mask).value
        self.cqes = (_Cqe * params.cq_entries).from_address(cq_base + cq.cqes)
        self.pending = 0  # entries queued in the ring, not yet submitted

    def _map(self, size: int, offset: int) -> int:
        address = _lib().mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | mmap.MAP_POPULATE,
                              self.fd, offset)
        if address in (None, ctypes.c_void_p(-1).value):
            code = ctypes.get_errno()
            raise OSError(code, f"mmap of the io_uring ring: {os.strerror(code)}")
        self._maps.append((address, size))
        return int(address)

    def queue(self, opcode: int, fd: int, address: int, length: int, offset: int, user_data: int) -> None:
        tail = self.sq_tail.value
        index = tail & self.sq_mask
        sqe = self.sqes[index]
        ctypes.memset(ctypes.addressof(sqe), 0, ctypes.sizeof(_Sqe))
        sqe.opcode, sqe.fd, sqe.off, sqe.addr, sqe.len, sqe.user_data = opcode, fd, offset, address, length, user_data
        self.sq_array[index] = index
        self.sq_tail.value = (tail + 1) & 0xFFFFFFFF  # after the entry: x86-64 keeps stores in order
        self.pending += 1

    def enter(self, wait_for: int) -> None:
        """Submit the queued entries and wait until `wait_for` completions are posted (GIL released)."""
        flags = _ENTER_GETEVENTS if wait_for else 0
        while True:
            submitted = int(_lib().syscall(ctypes.c_long(_SYS_ENTER), ctypes.c_int(self.fd), ctypes.c_uint(self.pending),
                                           ctypes.c_uint(wait_for), ctypes.c_uint(flags), None, ctypes.c_size_t(0)))
            if submitted >= 0:
                self.pending -= submitted
                return
            code = ctypes.get_errno()
            if code not in (errno_codes.EINTR, errno_codes.EAGAIN, errno_codes.EBUSY):
                raise OSError(code, f"io_uring_enter: {os.strerror(code)}")

    def completions(self) -> list[tuple[int, int]]:
        """(user_data, result) of every posted completion, consumed."""
        head, tail = self.cq_head.value, self.cq_tail.value
        found = []
        while head != tail:
            cqe = self.cqes[head & self.cq_mask]
            found.append((int(cqe.user_data), int(cqe.res)))
            head = (head + 1) & 0xFFFFFFFF
        self.cq_head.value = head
        return found

    def close(self) -> None:
        for address, size in self._maps:
            _lib().munmap(address, size)
        self._maps.clear()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _serve(ring_entries: int, blocks: queue.SimpleQueue[Block | None], started: threading.Event,
           failure: list[BaseException]) -> None:
    """One thread: its ring keeps up to ring_entries blocks of the shared queue in flight."""
    try:
        ring = _Ring(ring_entries)
    except OSError as error:
        failure.append(error)
        started.set()
        return
    started.set()
    # In flight, by user_data: the block, and how many of its bytes have moved (short transfers continue).
    flight: dict[int, tuple[Block, int]] = {}
    stopping = False
    slot = 0
    broken: Exception | None = None
    try:
        while not stopping or flight:
            while not stopping and len(flight) < ring_entries:
                try:
                    block = blocks.get() if not flight else blocks.get_nowait()
                except queue.Empty:
                    break
                if block is None:
                    stopping = True
                    break
                if block.request.error is not None:  # an earlier block failed: issue nothing more of it
                    block.request.block_done(None)
                    continue
                if broken is not None:
                    block.request.block_done(block.request.failed(_call(block.request.write, block, 0),
                                                                  f"this thread's io_uring failed earlier: {broken}"))
                    continue
                slot += 1
                flight[slot] = (block, 0)
                _queue_block(ring, slot, block, 0)
            if not flight:
                continue
            try:
                ring.enter(1)
            except Exception as error:  # never leave requests waiting on blocks the ring lost
                broken = error
                _fail_all(flight, error)
                continue
            for user_data, result in ring.completions():
                block, moved = flight.pop(user_data)
                request = block.request
                if result < 0:
                    code = -result
                    request.block_done(request.failed(_call(request.write, block, moved), f"{os.strerror(code)} "
                                                      f"[errno {code}]", code))
                elif result == 0 and moved + result < block.needed:
                    request.block_done(request.ended_early(_call(request.write, block, moved)))
                elif moved + result < block.needed:  # short: queue the rest
                    flight[user_data] = (block, moved + result)
                    _queue_block(ring, user_data, block, moved + result)
                else:
                    block.finish_tail()
                    request.block_done(None)
    finally:
        if broken is None:  # a ring that may still complete lost blocks stays open and mapped
            ring.close()


# Buffers of blocks a broken ring may still complete: kept alive for the life of the process.
_LOST: list[object] = []


def _fail_all(flight: dict[int, tuple[Block, int]], error: Exception) -> None:
    """io_uring_enter failed: the ring is beyond use. Fail every block in flight, keeping its
    request's buffers alive for good, since the kernel may still complete it."""
    for block, moved in flight.values():
        _LOST.append(block.request.keep)
        block.request.block_done(block.request.failed(_call(block.request.write, block, moved), f"io_uring_enter: {error}"))
    flight.clear()


def _queue_block(ring: _Ring, user_data: int, block: Block, moved: int) -> None:
    ring.queue(_OP_WRITE if block.request.write else _OP_READ, block.request.fd, block.address + moved,
               block.length - moved, block.offset + moved, user_data)


def _call(write: bool, block: Block, moved: int) -> str:
    return f"io_uring {'write' if write else 'read'}({block.length - moved} bytes at offset {block.offset + moved})"


class _Rings(WorkerQueue):
    """intra_op_parallelism threads, each with its own ring, on one FIFO queue of blocks."""

    def __init__(self, threads: int, entries: int) -> None:
        super().__init__()
        self.threads, self.entries = threads, entries

    def ready(self) -> None:
        """Start the threads and their rings, if not yet: a ring that cannot be made is a SwapError."""
        with self._lock:
            self._forget_after_fork()
            while len(self._workers) < self.threads:
                started = threading.Event()
                failure: list[BaseException] = []
                worker = threading.Thread(target=_serve, args=(self.entries, self._queue, started, failure),
                                          daemon=True, name=f"zero-swap-uring-{len(self._workers)}")
                worker.start()
                started.wait()
                if failure:
                    raise SwapError(f"io_uring: cannot set up a ring of {self.entries} entries (aio.queue_depth): "
                                    f"{failure[0]}; lower aio.queue_depth, or use ZERO_SWAP_BACKEND=threads") from None
                self._workers.append(worker)

    def submit(self, blocks: list[Block]) -> None:
        self.put(blocks)


class IoUringBackend(QueuedBackend):
    """io_uring through raw system calls: queue_depth blocks in flight per thread, without a thread per block."""

    def _make_workers(self) -> WorkerQueue:
        return _Rings(self.aio.intra_op_parallelism, self.aio.queue_depth)

    @classmethod
    def available(cls) -> tuple[bool, str]:
        machine = platform.machine().lower()
        if machine not in ("x86_64", "amd64"):
            return False, f"needs x86-64 (this is {machine}): Python cannot order the ring's memory accesses elsewhere"
        release = platform.release().split(".")
        try:
            major, minor = int(release[0]), int(release[1].split("-")[0])
        except (ValueError, IndexError):
            major, minor = 0, 0
        if (major, minor) < (5, 6):
            return False, f"needs Linux 5.6+ for IORING_OP_READ/WRITE (this is {platform.release()})"
        try:
            params = _Params()
            os.close(_setup(1, params))
        except OSError as error:
            hint = {errno_codes.ENOSYS: " (kernel built without io_uring)",
                    errno_codes.EPERM: " (forbidden by a seccomp profile or kernel.io_uring_disabled)"}
            return False, f"io_uring_setup failed: {error.strerror}{hint.get(error.errno or 0, '')}"
        return True, f"io_uring by raw system calls (Linux {platform.release()}), queue_depth in flight per thread"
