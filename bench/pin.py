"""Pin throughput of each available pin backend, side by side with a plain memcpy and DeepSpeed.

Pins a 1 GiB tensor (pin_memory with make_copy: allocate, lock, copy) and prints each time
and its CPU time, and the ratio of CPU times to a memcpy of the same size into memory that is
already faulted in (the floor on this machine) and to DeepSpeed's native pin: on a shared
machine the wall time also counts waiting for a CPU. The native backend is measured cold
(a fresh block: its pages must be faulted in while it is locked), also with transparent huge
pages (ZERO_PIN_HUGE_PAGES=1) where the kernel offers them, and from its cache (a block
released by an earlier pin of the same size: resident and locked, so the pin is a copy).
Each round runs every case once, so a busy spell on a shared machine slows all of them. A plain
clone shows what any fresh copy costs. DeepSpeed's row is its accelerator's pin_memory with
DS_PIN_MEMORY_BACKEND=native (posix_memalign + mlock, its pin_memory op), skipped with the
reason when DeepSpeed or its op is not there. Then the per-call overhead of pinning small
tensors, against cloning them, and of is_pinned.

Usage: python bench/pin.py [--mib 1024] [--repeat 3] [--small-bytes 4096] [--calls 2000] [--no-deepspeed]
The native backends need RLIMIT_MEMLOCK above the size (`ulimit -l unlimited`) or CAP_IPC_LOCK.
DeepSpeed's first use builds its op (minutes); the build is cached in torch's extension folder.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import os
import resource
import time
from collections.abc import Iterator
from typing import Any, Callable

import torch

import zero_pin
from zero_pin._cache import ENV_VAR as CACHE_ENV_VAR
from zero_pin._cache import cache_limit
from zero_pin._hugepages import ENV_VAR as HUGE_ENV_VAR
from zero_pin._hugepages import huge_page_policy
from zero_plugins import ZeroError, format_table

Pin = Callable[[torch.Tensor], torch.Tensor]


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class Case:
    """One row of the large-tensor table: `make` is timed; `before` runs untimed ahead of each run,
    after the previous result was dropped; `check` looks at the first result."""

    def __init__(self, label: str, make: Callable[[], Any], note: str, before: Callable[[], Any] | None = None,
                 env: dict[str, str] | None = None, check: Callable[[Any], None] | None = None,
                 huge_pages: bool = False) -> None:
        self.label, self.make, self.note, self.before, self.env, self.check = label, make, note, before, env or {}, check
        self.huge_pages = huge_pages  # report how much of the result huge pages back
        self.seconds, self.cpu_seconds, self.faults, self.huge_mib, self.error = float("inf"), float("inf"), 0, None, ""
        self.no_op = False

    def run(self) -> None:
        if self.error:
            return
        gc.collect()
        with environment(**self.env):
            if self.before is not None:
                self.before()
            start_faults, started, start_cpu = faults(), time.perf_counter(), time.thread_time()
            try:
                result = self.make()
            except ZeroError as error:
                self.error = str(error)
                return
            seconds, cpu_seconds, faulted = time.perf_counter() - started, time.thread_time() - start_cpu, faults() - start_faults
        self.cpu_seconds = min(self.cpu_seconds, cpu_seconds)
        if seconds < self.seconds:
            self.seconds, self.faults = seconds, faulted
        if self.check is not None:
            self.check(result)
            self.check = None
        if self.huge_pages:
            self.huge_mib = huge_page_mib(result)
        del result  # freed, or back in the cache, before the next case runs


def run_in_rounds(cases: list[Case], rounds: int) -> None:
    """Every case once per round, `rounds` times; each keeps its best. On a shared machine a
    busy spell then slows every case alike rather than whichever case it fell on."""
    for _ in range(rounds):
        for case in cases:
            case.run()


def huge_page_mib(tensor: torch.Tensor) -> float:
    """How much of the tensor's memory is backed by transparent huge pages (AnonHugePages in smaps)."""
    start = tensor.untyped_storage().data_ptr()
    end = start + tensor.untyped_storage().nbytes()
    total_kib, inside = 0, False
    try:
        with open("/proc/self/smaps") as smaps:
            for line in smaps:
                head = line.split()[0]
                if "-" in head and not head.endswith(":"):
                    low, high = (int(part, 16) for part in head.split("-"))
                    inside = low < end and high > start
                elif inside and head == "AnonHugePages:":
                    total_kib += int(line.split()[1])
    except OSError:
        return 0.0
    return total_kib / 1024


def deepspeed_native() -> tuple[Pin | None, Callable[[torch.Tensor], bool] | None, str]:
    """DeepSpeed's accelerator pin_memory / is_pinned with DS_PIN_MEMORY_BACKEND=native, or why not."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        import deepspeed
        from deepspeed.accelerator import get_accelerator
        from deepspeed.utils.pin_memory import get_native_pinned_memory
    except Exception as error:  # not installed, or it fails to import here
        return None, None, f"skipped: deepspeed does not import ({type(error).__name__}: {error})"
    print(f"loading DeepSpeed {deepspeed.__version__}'s pin_memory op (its first use builds it: minutes)...", flush=True)
    try:
        get_native_pinned_memory()  # builds or loads the op
    except Exception as error:
        cause = error.__cause__ or error
        return None, None, f"skipped: DeepSpeed's pin_memory op does not build here ({type(cause).__name__}: {cause})"
    accelerator = get_accelerator()

    def pin(tensor: torch.Tensor) -> torch.Tensor:
        with environment(DS_PIN_MEMORY_BACKEND="native"):
            pinned: torch.Tensor = accelerator.pin_memory(tensor)
        return pinned

    def is_pinned(tensor: torch.Tensor) -> bool:
        with environment(DS_PIN_MEMORY_BACKEND="native"):
            return bool(accelerator.is_pinned(tensor))

    return pin, is_pinned, f"DeepSpeed {deepspeed.__version__}, {type(accelerator).__name__}"


def per_call_us(call: Callable[[], Any], calls: int) -> float:
    """CPU microseconds per call (this thread's: waiting for a busy CPU does not count)."""
    started = time.thread_time()
    for _ in range(calls):
        call()
    return (time.thread_time() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="size of the large tensor (default 1024)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is kept")
    parser.add_argument("--small-bytes", type=int, default=4096, help="size of the small tensors")
    parser.add_argument("--calls", type=int, default=2000, help="calls per small-tensor measurement")
    parser.add_argument("--no-deepspeed", action="store_true", help="leave DeepSpeed out")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a memcpy is one thread; so is every backend's copy here

    size = args.mib << 20
    if cache_limit() < size:  # the cache must be able to hold one block of the size
        os.environ[CACHE_ENV_VAR] = str(size)
    source = torch.ones(size, dtype=torch.uint8)
    target = source.clone()  # faulted in: a warm memcpy is the floor
    ds_pin, ds_is_pinned, ds_note = (None, None, "skipped: --no-deepspeed") if args.no_deepspeed else deepspeed_native()

    def pinned_copy(is_pinned: Callable[[torch.Tensor], bool]) -> Callable[[Any], None]:
        def check(result: Any) -> None:
            assert is_pinned(result) and torch.equal(result[:4096], source[:4096])
        return check

    memcpy = Case("memcpy (warm target)", lambda: target.copy_(source), "the floor: a copy into resident pages")
    cases = [memcpy, Case("clone (unpinned)", source.clone, "allocate + fault in + copy: any fresh copy")]
    for status in zero_pin.backend_statuses():
        if not status["available"]:
            continue
        backend = zero_pin.get_backend(status["name"])

        def pin_with(backend: zero_pin.PinBackend = backend) -> torch.Tensor:
            return backend.pin_memory(source)

        if status["name"] != "native":
            case = Case(status["name"], pin_with, "allocate + lock + copy")
            case.check = lambda result, case=case: setattr(case, "no_op", result is source)
            cases.append(case)
            continue
        check = pinned_copy(backend.is_pinned)
        with environment(**{HUGE_ENV_VAR: "1"}):
            huge = huge_page_policy()
        if huge["used"]:  # the kernel offers them: measure the opt-in too (before the default, whose block the cached pin takes)
            cases.append(Case("native, cold, huge pages", pin_with, f"{HUGE_ENV_VAR}=1: 2 MiB pages, MADV_HUGEPAGE",
                              before=zero_pin.empty_cache, env={HUGE_ENV_VAR: "1"}, check=check, huge_pages=True))
        cases.append(Case("native, cold", pin_with, "a fresh block: allocate + fault in + lock + copy",
                          before=zero_pin.empty_cache, check=check, huge_pages=True))
        cases.append(Case("native, from the cache", pin_with,
                          "the block the previous pin released: resident and locked, so just the copy",
                          check=check, huge_pages=True))
    ds = Case("deepspeed native", (lambda: ds_pin(source)) if ds_pin else (lambda: None), ds_note,
              check=pinned_copy(ds_is_pinned) if ds_is_pinned else None)
    ds.error = "" if ds_pin else ds_note
    cases.append(ds)
    run_in_rounds(cases, args.repeat)
    zero_pin.empty_cache()

    table = []
    for case in cases:
        if case.error:
            table.append((case.label, "-", "-", "-", "-", "-", "-", "-", case.error))
            continue
        seconds = case.seconds
        table.append((case.label, f"{seconds * 1e3:.1f}" if seconds >= 0.01 else f"{seconds * 1e3:.3f}",
                      f"{case.cpu_seconds * 1e3:.1f}" if case.cpu_seconds >= 0.01 else f"{case.cpu_seconds * 1e3:.3f}",
                      "-" if case.no_op else f"{size / case.cpu_seconds / 1e9:.2f}",
                      f"{case.cpu_seconds / memcpy.cpu_seconds:.2f}",
                      "-" if ds.error else f"{case.cpu_seconds / ds.cpu_seconds:.2f}",
                      "-" if case.no_op else str(case.faults), "-" if case.huge_mib is None else f"{case.huge_mib:.0f}",
                      case.note if not case.no_op else f"no-op: {zero_pin.get_backend(case.label).available()[1]}"))
    print(f"\npin_memory of {args.mib} MiB, best of {args.repeat} rounds. ms: wall time; cpu ms: the thread's CPU time "
          "(user + system: page faults count, waiting for a busy CPU does not); GB/s, x memcpy, x DeepSpeed: from cpu ms:")
    print(format_table(["", "ms", "cpu ms", "GB/s", "x memcpy", "x DeepSpeed", "page faults", "huge MiB", "note"], table))

    small = torch.ones(args.small_bytes, dtype=torch.uint8)
    pinners: list[tuple[str, Pin | None, Callable[[torch.Tensor], bool] | None, dict[str, str]]] = [
        ("clone (no pinning)", None, None, {})]
    for status in zero_pin.backend_statuses():
        if status["available"]:
            backend = zero_pin.get_backend(status["name"])
            if status["name"] == "native":
                pinners.append(("native, from the cache", backend.pin_memory, backend.is_pinned, {}))
                pinners.append((f"native, {CACHE_ENV_VAR}=0", backend.pin_memory, backend.is_pinned, {CACHE_ENV_VAR: "0"}))
            else:
                pinners.append((status["name"], backend.pin_memory, backend.is_pinned, {}))
    if ds_pin is not None and ds_is_pinned is not None:
        pinners.append(("deepspeed native", ds_pin, ds_is_pinned, {}))
    best: dict[str, tuple[float, float]] = {}
    errors: dict[str, str] = {}
    for _ in range(args.repeat):  # in rounds too, each keeping its best
        for label, pin, is_pinned, env in pinners:
            if label in errors:
                continue
            if pin is None or is_pinned is None:
                timings = (per_call_us(small.clone, args.calls), -1.0)  # no is_pinned
            else:
                with environment(**env):
                    try:
                        pinned = pin(small)
                    except ZeroError as error:
                        errors[label] = str(error)
                        continue
                    timings = (per_call_us(lambda: pin(small), args.calls),
                               per_call_us(lambda: is_pinned(pinned), args.calls))
                    del pinned
            previous = best.get(label, (float("inf"), float("inf")))
            best[label] = (min(previous[0], timings[0]), min(previous[1], timings[1]))
    clone_us = best["clone (no pinning)"][0]
    small_rows = []
    for label, *_ in pinners:
        if label in errors:
            small_rows.append((label, "-", "-", errors[label]))
            continue
        pin_us, check_us = best[label]
        small_rows.append((label, f"{pin_us:.1f}", f"{pin_us / clone_us:.1f}", "-" if check_us < 0 else f"{check_us:.1f}"))
    print(f"\nper call, {args.small_bytes} B tensors, {args.calls} calls, best of {args.repeat} rounds, CPU time "
          "(pin includes freeing or caching the result):")
    print(format_table(["", "pin_memory us", "x clone", "is_pinned us"], small_rows))

if __name__ == "__main__":
    main()
