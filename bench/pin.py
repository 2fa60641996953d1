"""Pin throughput of each available pin backend, side by side with a plain memcpy.

Pins a 1 GiB tensor (pin_memory with make_copy: allocate, lock, copy) with every available
backend and prints its throughput as a ratio to a memcpy of the same size into memory that is
already faulted in (the limit on this machine). Then the per-call overhead of pinning small
tensors, against cloning them, and of is_pinned. A plain clone of the large tensor is shown too:
fresh memory must be faulted in, pinned or not.

Usage: python bench/pin.py [--mib 1024] [--repeat 3] [--small-bytes 4096] [--calls 2000]
The native backend needs RLIMIT_MEMLOCK above the size (`ulimit -l unlimited`) or CAP_IPC_LOCK.
"""
from __future__ import annotations

import argparse
import gc
import time
from typing import Any, Callable

import torch

import zero_pin
from zero_plugins import ZeroError, format_table


def best_seconds(make: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Fastest of `repeat` runs; each result is dropped (and its memory freed) before the next."""
    best, result = float("inf"), None
    for _ in range(repeat):
        result = None
        gc.collect()
        started = time.perf_counter()
        result = make()
        best = min(best, time.perf_counter() - started)
    return best, result


def per_call_us(call: Callable[[], Any], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="size of the large tensor (default 1024)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is kept")
    parser.add_argument("--small-bytes", type=int, default=4096, help="size of the small tensors")
    parser.add_argument("--calls", type=int, default=2000, help="calls per small-tensor measurement")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a memcpy is one thread; so is every backend's copy here

    size = args.mib << 20
    source = torch.ones(size, dtype=torch.uint8)
    target = source.clone()  # faulted in: a warm memcpy is the ceiling
    memcpy_s, _ = best_seconds(lambda: target.copy_(source), args.repeat)
    gbps = lambda seconds: size / seconds / 1e9  # noqa: E731
    clone_s, _ = best_seconds(source.clone, args.repeat)
    rows = [("memcpy (warm target)", f"{memcpy_s * 1e3:.1f}", f"{gbps(memcpy_s):.2f}", "1.00", "baseline"),
            ("clone (unpinned)", f"{clone_s * 1e3:.1f}", f"{gbps(clone_s):.2f}", f"{memcpy_s / clone_s:.2f}",
             "allocate + fault in + copy: what any fresh copy costs")]

    backends = [s for s in zero_pin.backend_statuses() if s["available"]]
    for status in backends:
        backend = zero_pin.get_backend(status["name"])
        try:
            seconds, pinned = best_seconds(lambda: backend.pin_memory(source), args.repeat)
        except ZeroError as error:
            rows.append((status["name"], "-", "-", "-", str(error)))
            continue
        if pinned is source:
            rows.append((status["name"], f"{seconds * 1e3:.3f}", "-", "-", f"no-op: {status['reason']}"))
        else:
            assert backend.is_pinned(pinned) and torch.equal(pinned[:4096], source[:4096])
            rows.append((status["name"], f"{seconds * 1e3:.1f}", f"{gbps(seconds):.2f}",
                         f"{memcpy_s / seconds:.2f}", "allocate + lock + copy"))
        del pinned
    print(f"pin_memory of {args.mib} MiB, best of {args.repeat}:")
    print(format_table(["", "ms", "GB/s", "x memcpy", "note"], rows))

    small = torch.ones(args.small_bytes, dtype=torch.uint8)
    clone_us = per_call_us(small.clone, args.calls)
    rows = [("clone (no pinning)", f"{clone_us:.1f}", "1.0", "-")]
    for status in backends:
        backend = zero_pin.get_backend(status["name"])
        try:
            pinned = backend.pin_memory(small)
        except ZeroError as error:
            rows.append((status["name"], "-", "-", str(error)))
            continue
        pin_us = per_call_us(lambda: backend.pin_memory(small), args.calls)
        check_us = per_call_us(lambda: backend.is_pinned(pinned), args.calls)
        rows.append((status["name"], f"{pin_us:.1f}", f"{pin_us / clone_us:.1f}", f"{check_us:.1f}"))
    print(f"\nper call, {args.small_bytes} B tensors, {args.calls} calls (pin includes freeing the result):")
    print(format_table(["", "pin_memory us", "x clone", "is_pinned us"], rows))


if __name__ == "__main__":
    main()
