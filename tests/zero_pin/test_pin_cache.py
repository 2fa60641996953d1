"""The native backend's cache of locked blocks: reuse, accounting, bound, empty_cache, memlock, threads."""
from __future__ import annotations

import gc
import json
import re
import resource
import sys
import threading

import pytest
import torch

import zero_pin
from zero_pin._cache import cache_limit
from zero_pin._guard import GuardedLock
from zero_pin._memlock import locked_bytes
from zero_pin._units import format_bytes

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmLck from /proc")
PAGE = resource.getpagesize()


@pytest.fixture(autouse=True)
def cache(monkeypatch):
    """A 1 MiB cache, empty at the start and emptied at the end (other files see no block of ours)."""
    monkeypatch.setenv("ZERO_PIN_CACHE_BYTES", str(1 << 20))
    gc.collect()  # blocks whose last view dies late (earlier tests' objects) are released now, not mid-test
    zero_pin.empty_cache()
    yield
    gc.collect()
    zero_pin.empty_cache()


def pin(native, nbytes: int) -> torch.Tensor:
    return native.pin_memory(torch.empty(nbytes, dtype=torch.uint8), make_copy=False)


def native_stats() -> dict:
    return zero_pin.pinned_memory_stats()["backends"].get("native", {"current": 0, "peak": 0, "cached": 0})


def cached_sizes(native) -> list[int]:
    return [block.nbytes for block in native.cache.blocks()]


@linux_only
def test_a_pin_after_a_release_of_the_same_size_reuses_the_locked_block(native):
    source = torch.arange(10_000, dtype=torch.uint8)
    kernel, before = locked_bytes(), native_stats()["current"]
    pinned = native.pin_memory(source)
    address = pinned.data_ptr()
    del pinned
    gc.collect()
    size = -(-10_000 // PAGE) * PAGE  # in whole pages
    assert cached_sizes(native) == [size]
    assert locked_bytes() - kernel == size  # still locked: its pages stay resident
    assert native_stats()["current"] - before == size and native_stats()["cached"] == size

    again = native.pin_memory(torch.ones(size - 100, dtype=torch.uint8))  # the same size in pages
    assert again.data_ptr() == address and native.is_pinned(again) and torch.equal(again, torch.ones_like(again))
    assert cached_sizes(native) == [] and native_stats()["cached"] == 0
    assert locked_bytes() - kernel == size and native_stats()["current"] - before == size
    other = pin(native, 4 * PAGE)  # another size: a new block
    assert other.data_ptr() != address and locked_bytes() - kernel == size + 4 * PAGE


@linux_only
def test_a_cached_pin_faults_no_page_in(native):
    source = torch.ones(1 << 20, dtype=torch.uint8)
    faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt  # noqa: E731

    pinned = native.pin_memory(source)  # cold: its pages may or may not fault, as malloc reuses freed memory
    address = pinned.data_ptr()
    del pinned
    gc.collect()
    start = faults()
    pinned = native.pin_memory(source)
    cached = faults() - start
    assert pinned.data_ptr() == address and cached < 16, cached


def test_cached_bytes_stay_counted_and_are_reported_apart(native, caplog):
    in_use = pin(native, 2 * PAGE)
    spare = pin(native, PAGE)
    stats = native_stats()
    del spare
    gc.collect()
    after = zero_pin.pinned_memory_stats()
    assert after["backends"]["native"] == {"current": stats["current"], "peak": stats["peak"], "cached": PAGE}
    assert after["total"]["cached"] == PAGE and after["total"]["current"] >= stats["current"]
    line = zero_pin.pinned_memory_summary("cache")
    page = re.escape(format_bytes(PAGE))
    assert re.search(rf"pinned now \({page} of it cached for reuse\).*native .* \({page} cached, peak ", line)
    taken = pin(native, PAGE)  # from the cache: in use again, nothing added, no new peak
    assert native_stats() == {**stats, "cached": 0}
    del in_use, taken


@linux_only
def test_empty_cache_unlocks_frees_and_uncounts(native):
    kernel, before = locked_bytes(), native_stats()["current"]
    blocks = [pin(native, n * PAGE) for n in (1, 2, 5)]
    del blocks
    gc.collect()
    assert native_stats()["cached"] == 8 * PAGE and locked_bytes() - kernel == 8 * PAGE
    assert zero_pin.empty_cache() == 8 * PAGE
    assert native_stats()["cached"] == 0 and native_stats()["current"] == before
    assert locked_bytes() == kernel and cached_sizes(native) == []
    assert zero_pin.empty_cache() == 0


def test_the_bound_evicts_the_oldest_blocks(native, monkeypatch):
    monkeypatch.setenv("ZERO_PIN_CACHE_BYTES", str(5 * PAGE))
    before = native_stats()["current"]
    one, two, three = pin(native, PAGE), pin(native, 2 * PAGE), pin(native, 3 * PAGE)
    del one
    gc.collect()
    del two
    gc.collect()
    assert cached_sizes(native) == [PAGE, 2 * PAGE]
    del three  # 6 pages would not fit in 5: the oldest goes
    gc.collect()
    assert cached_sizes(native) == [2 * PAGE, 3 * PAGE]
    assert native_stats()["cached"] == 5 * PAGE and native_stats()["current"] == before + 5 * PAGE
    too_big = pin(native, 6 * PAGE)  # larger than the whole cache: freed, and nothing is evicted for it
    del too_big
    gc.collect()
    assert cached_sizes(native) == [2 * PAGE, 3 * PAGE] and native_stats()["current"] == before + 5 * PAGE

    monkeypatch.setenv("ZERO_PIN_CACHE_BYTES", str(3 * PAGE))  # a smaller bound applies at the next pin
    pinned = pin(native, 3 * PAGE)
    assert cached_sizes(native) == [] and native_stats()["current"] == before + 3 * PAGE
    del pinned


@linux_only
def test_zero_turns_the_cache_off(native, monkeypatch):
    kept = pin(native, PAGE)
    del kept
    gc.collect()
    assert cached_sizes(native) == [PAGE]
    monkeypatch.setenv("ZERO_PIN_CACHE_BYTES", "0")
    kernel, before = locked_bytes(), native_stats()["current"]
    pinned = pin(native, 2 * PAGE)  # the next pin applies it: what was cached is freed
    assert cached_sizes(native) == [] and locked_bytes() - kernel == PAGE
    del pinned
    gc.collect()
    assert cached_sizes(native) == [] and locked_bytes() - kernel == -PAGE
    assert native_stats()["current"] == before - PAGE and native_stats()["cached"] == 0


def test_an_unpinned_block_is_freed_not_cached(native):
    pinned = pin(native, PAGE)
    assert native.unpin_memory(pinned)
    del pinned
    gc.collect()
    assert cached_sizes(native) == [] and native_stats()["cached"] == 0


@pytest.mark.parametrize(("value", "limit"), [("0", 0), ("4096", 4096), ("512K", 512 << 10), ("2GiB", 2 << 30),
                                              ("1m", 1 << 20), (" 3 MB ", 3 << 20), ("", 1 << 30)])
def test_the_bound_is_bytes_with_optional_binary_units(monkeypatch, value, limit):
    monkeypatch.setenv("ZERO_PIN_CACHE_BYTES", value)
    assert cache_limit() == limit


def test_a_bad_bound_fails_in_one_line_naming_the_variable(native, monkeypatch):
    monkeypatch.setenv("ZERO_PIN_CACHE_BYTES", "lots")
    with pytest.raises(zero_pin.PinError, match=re.escape("ZERO_PIN_CACHE_BYTES must be a size in bytes")) as error:
        pin(native, PAGE)
    assert "\n" not in str(error.value) and "'lots'" in str(error.value)
    monkeypatch.delenv("ZERO_PIN_CACHE_BYTES")
    assert cache_limit() == 1 << 30  # the documented default


def test_a_view_dying_while_this_thread_holds_a_lock_is_released_after(native):
    pinned = pin(native, PAGE)
    with GuardedLock():  # as if a collection freed the tensor inside one of zero-pin's critical sections
        del pinned
        gc.collect()
        assert cached_sizes(native) == []  # deferred: no lock is taken from inside the callback
    assert cached_sizes(native) == [PAGE]


def test_threads_share_one_cache_and_keep_the_counts_exact(native):
    before = native_stats()["current"]
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for step in range(60):
                pinned = pin(native, (1 + (seed + step) % 3) * PAGE)
                assert native.is_pinned(pinned[PAGE // 2:])
                if step % 7 == 0:
                    assert native.unpin_memory(pinned)
                del pinned
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    gc.collect()
    assert not errors
    cached = sum(cached_sizes(native))
    assert native_stats()["cached"] == cached == native.cache.nbytes() and 0 < cached <= 1 << 20
    assert native_stats()["current"] == before + cached
    zero_pin.empty_cache()
    assert native_stats()["current"] == before


# A fresh interpreter that loads the op, caps RLIMIT_MEMLOCK at 1 MiB and, as root, becomes
# `nobody` (dropping CAP_IPC_LOCK), as test_pin_memlock.py does.
MEMLOCK_CHILD = r"""
import gc, json, os, resource, torch, zero_pin
from zero_pin._memlock import can_lock_beyond_limit, locked_bytes
backend = zero_pin.get_backend("native")
backend.unpin_memory(backend.pin_memory(torch.ones(1)))  # import everything lazily imported
resource.setrlimit(resource.RLIMIT_MEMLOCK, (1 << 20, 1 << 20))
if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)
KiB = 1024
pin = lambda n: backend.pin_memory(torch.empty(n, dtype=torch.uint8), make_copy=False)
cached = lambda: zero_pin.pinned_memory_stats()["backends"]["native"]["cached"]
out = {"privileged": can_lock_beyond_limit(), "before": locked_bytes()}
half = pin(512 * KiB)
del half
gc.collect()
out["cached_half"] = [cached(), locked_bytes()]
most = pin(768 * KiB)  # 512 KiB cached + 768 KiB is over 1 MiB: the cached block goes first
address = most.data_ptr()
out["most"] = [cached(), locked_bytes()]
del most
gc.collect()
zero_pin.check_memlock(512 * KiB)  # 768 KiB locked, but cached: it counts as free
again = pin(768 * KiB)
out["again"] = [again.data_ptr() == address, cached(), locked_bytes()]
del again
gc.collect()
import zero_pin._native_backend as native_module  # past our check, the kernel refuses: retry without the cache
native_module.memlock_overage = lambda nbytes: 0
retried = pin(512 * KiB)
out["retried"] = [cached(), locked_bytes()]
del retried
gc.collect()
zero_pin.empty_cache()
native_module.memlock_overage = zero_pin._memlock.memlock_overage
try:
    pin(2 << 20)
except zero_pin.MemlockLimitError as error:
    out["error"] = str(error)
out["after_error"] = [cached(), locked_bytes()]
print(json.dumps(out))
"""


@linux_only
def test_cached_blocks_are_released_before_a_lock_would_exceed_the_limit(native, run_python):
    out = run_python(MEMLOCK_CHILD).data
    if out["privileged"]:
        pytest.skip("this process keeps CAP_IPC_LOCK without root (ambient capability)")
    base, KiB = out["before"], 1024
    assert out["cached_half"] == [512 * KiB, base + 512 * KiB]
    assert out["most"] == [0, base + 768 * KiB]
    assert out["again"] == [True, 0, base + 768 * KiB]
    assert out["retried"] == [0, base + 512 * KiB]
    assert out["error"].startswith(f"cannot pin 2.00 MiB: RLIMIT_MEMLOCK is 1.00 MiB and {format_bytes(base)} is already locked")
    assert out["after_error"] == [0, base]


EXIT_AND_FORK_CHILD = r"""
import atexit, json
out = {}
def report():
    out["at_exit"] = [zero_pin.pinned_memory_stats()["total"], locked_bytes()]
    print(json.dumps(out))
atexit.register(report)  # before zero-pin registers its own exit handler, so it runs after it
import gc, os, torch, zero_pin
from zero_pin._memlock import locked_bytes
backend = zero_pin.get_backend("native")
kept = backend.pin_memory(torch.ones(4096, dtype=torch.uint8))
live = backend.pin_memory(torch.ones(8192, dtype=torch.uint8))
del kept
gc.collect()
out["cached"] = zero_pin.pinned_memory_stats()["total"]["cached"]
read, write = os.pipe()
child = os.fork()
if child == 0:  # mlock is not inherited: the child's copies of blocks locked before are not locked
    del live  # so it is not cached here either
    gc.collect()
    total = zero_pin.pinned_memory_stats()["total"]
    os.write(write, json.dumps([total["cached"], total["current"], locked_bytes()]).encode())
    os._exit(0)
os.waitpid(child, 0)
out["child"] = json.loads(os.read(read, 1000))
del live
"""


@linux_only
def test_the_cache_is_released_at_exit_and_dropped_in_a_forked_child(native, run_python):
    out = run_python(EXIT_AND_FORK_CHILD).data
    assert out["cached"] == 4096
    assert out["child"] == [0, 0, 0]
    total, locked = out["at_exit"]
    assert total["cached"] == 0 and total["current"] == 0 and locked == 0


def test_huge_pages_are_asked_for_large_blocks_only_on_request(native, monkeypatch):
    from zero_pin._hugepages import huge_page_policy

    block = lambda tensor: native._ranges.find(tensor.data_ptr(), tensor.data_ptr() + 1)[1].block  # noqa: E731
    off = huge_page_policy()
    assert not off["used"] and "ZERO_PIN_HUGE_PAGES=1" in off["reason"]
    huge = off["min_bytes"]
    default = pin(native, 2 * huge)
    assert not block(default).huge_pages
    monkeypatch.setenv("ZERO_PIN_HUGE_PAGES", "1")
    policy = huge_page_policy()
    if not policy["used"]:
        pytest.skip(policy["reason"])
    large, small = pin(native, 2 * huge), pin(native, huge - PAGE)
    assert large.data_ptr() % huge == 0 and block(large).huge_pages
    assert not block(small).huge_pages
    del default, large, small


def test_check_reports_the_cache_and_huge_pages(capsys, native, monkeypatch):
    pytest.importorskip("zero_cli")
    from cli_helpers import run_main

    code, out, _ = run_main(capsys, "pin", "check")
    assert code == 0
    assert "native pin cache: keeps up to 1.00 MiB of released blocks for reuse (ZERO_PIN_CACHE_BYTES), 0 B cached now" in out
    assert "native huge pages: not used (off unless ZERO_PIN_HUGE_PAGES=1, which asks for them" in out
    code, out, _ = run_main(capsys, "pin", "check", "--json")
    data = json.loads(out)
    assert data["pin_cache"] == {"limit": 1 << 20, "cached": 0}
    assert set(data["huge_pages"]) == {"used", "mode", "min_bytes", "reason"}
    monkeypatch.setenv("ZERO_PIN_CACHE_BYTES", "0")
    _, out, _ = run_main(capsys, "pin", "check")
    assert "native pin cache: off (ZERO_PIN_CACHE_BYTES=0), 0 B cached now" in out
