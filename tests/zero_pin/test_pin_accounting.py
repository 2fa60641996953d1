"""Pinned-bytes accounting: current and peak per backend, milestone logs, summary line."""
from __future__ import annotations

import gc
import logging

import torch

import zero_pin
from zero_pin._accounting import PinnedMemoryAccount
from zero_pin._units import GiB


def milestones(caplog) -> list[str]:
    return [r.getMessage().split(":")[0] for r in caplog.records if r.name == "zero_pin"]


def test_the_total_logs_at_32_gib_then_each_doubling_once(caplog):
    caplog.set_level(logging.INFO, logger="zero_pin")
    account = PinnedMemoryAccount()
    account.add("native", 31 * GiB)
    assert milestones(caplog) == []
    account.add("torch", 2 * GiB)  # the total counts, whichever backend pushes it over
    account.add("native", 40 * GiB)  # 73 GiB: past 64, short of 128
    assert milestones(caplog) == ["pinned host memory reached 32.00 GiB", "pinned host memory reached 64.00 GiB"]
    account.remove("native", 40 * GiB)
    account.add("native", 40 * GiB)  # back over 64: already reported
    account.add("native", 300 * GiB)  # 373 GiB: past 128 and 256 at once
    assert milestones(caplog)[2:] == ["pinned host memory reached 128.00 GiB", "pinned host memory reached 256.00 GiB"]
    assert "native 371.00 GiB (peak 371.00 GiB), torch 2.00 GiB" in caplog.records[-1].getMessage()


def test_current_and_peak_per_backend_and_in_total():
    account = PinnedMemoryAccount()
    account.add("native", 300)
    account.add("torch", 200)
    account.remove("native", 300)
    account.add("native", 100)
    assert account.stats() == {
        "total": {"current": 300, "peak": 500},  # the peak of the sum, not the sum of the peaks
        "backends": {"native": {"current": 100, "peak": 300}, "torch": {"current": 200, "peak": 200}},
    }


def test_summary_is_logged_and_returned(caplog):
    caplog.set_level(logging.INFO, logger="zero_pin")
    account = PinnedMemoryAccount()
    assert account.summary() == "[pinned-memory] 0 B pinned now, peak 0 B"
    account.add("native", 3 * GiB // 2)
    line = account.summary("after init")
    assert line == "[pinned-memory after init] 1.50 GiB pinned now, peak 1.50 GiB: native 1.50 GiB (peak 1.50 GiB)"
    assert caplog.records[-1].getMessage() == line and caplog.records[-1].levelno == logging.INFO


def test_the_process_wide_summary_covers_native_pins(native):
    pinned = native.pin_memory(torch.ones(1024))
    assert "native " in zero_pin.pinned_memory_summary("now")
    del pinned


def test_a_tracked_storage_is_counted_until_its_last_view_dies():
    before = zero_pin.pinned_memory_stats()["backends"].get("tracked", {}).get("current", 0)
    tensor = torch.ones(1000, dtype=torch.float64)
    zero_pin.track_pinned_storage("tracked", tensor)
    view = tensor[10:20]
    del tensor
    gc.collect()
    assert zero_pin.pinned_memory_stats()["backends"]["tracked"]["current"] == before + 8000
    del view
    gc.collect()
    assert zero_pin.pinned_memory_stats()["backends"]["tracked"]["current"] == before
