"""zero-pin's count of torch's CPU allocator, byte for byte.

The count is process-wide and cannot be uninstalled, so it runs in one fresh interpreter (SCRIPT) that
records the figures at each step; each test checks one part of them. Sizes are uint8 tensors, so a
tensor of N elements is one allocation of exactly N bytes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

SCRIPT = r"""
import json, threading, torch, zero_pin

out = {}
stats = zero_pin.host_allocator_stats
earlier = torch.empty(4096, dtype=torch.uint8)  # allocated before the count began
out["counting_before"] = zero_pin.counting_host_allocations()
try:
    stats()
except RuntimeError as error:
    out["stats_before"] = str(error)

zero_pin.count_host_allocations()
zero_pin.count_host_allocations()  # a second call changes nothing
out["counting_after"] = zero_pin.counting_host_allocations()
out["start"] = stats()

tensor = torch.empty(1000, dtype=torch.uint8)
out["allocated"] = stats()
out["address"] = tensor.data_ptr()
out["blocks"] = zero_pin.counted_blocks()
out["counts"] = {"tensor": zero_pin.host_allocator_counts(tensor.untyped_storage()),
                 "view": zero_pin.host_allocator_counts(tensor[10:].untyped_storage()),
                 "earlier": zero_pin.host_allocator_counts(earlier.untyped_storage()),
                 "empty": zero_pin.host_allocator_counts(torch.empty(0, dtype=torch.uint8).untyped_storage())}
del tensor
out["freed"] = stats()

big = torch.empty(1 << 20, dtype=torch.uint8)
del big
out["after_big"] = stats()
zero_pin.reset_host_allocator_peak()
out["after_reset"] = stats()

del earlier  # its free is not the count's
out["earlier_freed"] = stats()

held = []
worker = threading.Thread(target=lambda: held.append(torch.empty(3000, dtype=torch.uint8)))
worker.start()
worker.join()
out["thread"] = stats()
held.clear()  # freed on this thread
out["thread_freed"] = stats()

zero_pin.reset_host_allocator_peak()
grown = torch.empty(100, dtype=torch.uint8)
grown.resize_(300)  # a new allocation of 300 bytes; the old 100 are freed after the copy
out["resized"] = stats()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def counted() -> dict[str, Any]:
    # TORCH_EXTENSIONS_DIR (tests/zero_pin/conftest.py) is inherited: the op is built once per session.
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=dict(os.environ), capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_nothing_is_counted_until_the_count_begins(counted: dict[str, Any]) -> None:
    assert counted["counting_before"] is False and counted["counting_after"] is True
    assert "count_host_allocations() first" in counted["stats_before"]
    assert counted["start"] == {"current": 0, "peak": 0, "allocations": 0, "live_blocks": 0}


def test_an_allocation_and_its_free_are_counted_exactly(counted: dict[str, Any]) -> None:
    start, allocated, freed = counted["start"], counted["allocated"], counted["freed"]
    assert allocated["current"] == start["current"] + 1000
    assert allocated["allocations"] == start["allocations"] + 1
    assert allocated["live_blocks"] == start["live_blocks"] + 1
    assert freed["current"] == start["current"] and freed["live_blocks"] == start["live_blocks"]
    assert freed["allocations"] == allocated["allocations"], "allocations counts every allocation, freed or not"
    assert freed["peak"] == start["current"] + 1000


def test_the_peak_holds_until_reset(counted: dict[str, Any]) -> None:
    freed, after_big, after_reset = counted["freed"], counted["after_big"], counted["after_reset"]
    assert after_big["current"] == freed["current"]
    assert after_big["peak"] == freed["current"] + (1 << 20)
    assert after_reset["peak"] == after_reset["current"] == freed["current"]


def test_a_storage_from_before_the_count_is_neither_counted_nor_uncounted(counted: dict[str, Any]) -> None:
    assert counted["counts"]["earlier"] is False
    assert counted["earlier_freed"] == counted["after_reset"], "its free left every figure as it was"


def test_an_allocation_on_another_thread_is_counted(counted: dict[str, Any]) -> None:
    before, thread, freed = counted["earlier_freed"], counted["thread"], counted["thread_freed"]
    assert thread["current"] == before["current"] + 3000
    assert thread["allocations"] == before["allocations"] + 1
    assert freed["current"] == before["current"] and freed["live_blocks"] == before["live_blocks"]


def test_a_storage_resized_in_place_is_a_new_allocation(counted: dict[str, Any]) -> None:
    before, resized = counted["thread_freed"], counted["resized"]
    assert resized["current"] == before["current"] + 300
    assert resized["peak"] == before["current"] + 100 + 300, "both alive during the copy"
    assert resized["allocations"] == before["allocations"] + 2


def test_the_count_says_which_storages_it_holds(counted: dict[str, Any]) -> None:
    assert counted["counts"] == {"tensor": True, "view": True, "earlier": False, "empty": False}
    assert [counted["address"], 1000] in counted["blocks"]
    assert len(counted["blocks"]) == counted["allocated"]["live_blocks"]
