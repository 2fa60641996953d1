"""The memory ledger, its report and see_memory_usage."""
from __future__ import annotations

import gc
import re

import pytest
import torch
from zero_core import MemoryLedger, see_memory_usage
from zero_core.memory import LeverSetup, MemoryReport, measured_levers

MiB = 1024 * 1024


def test_a_storage_is_counted_once_and_uncounted_when_it_dies() -> None:
    ledger = MemoryLedger()
    buffer = ledger.register(torch.zeros(100), "grad.full")
    ledger.register(buffer[10:20], "grad.full")  # a view: same storage
    ledger.register(buffer[:5], "optim.state")  # already owned: keeps its first category
    assert ledger.current("grad.full") == 400 and ledger.current("optim.state") == 0
    del buffer
    gc.collect()
    assert ledger.current("grad.full") == 0 and ledger.peak("grad.full") == 400
    assert ledger.total() == 0 and ledger.total_peak() == 400


def test_peaks_reset_to_the_current_figures() -> None:
    ledger = MemoryLedger()
    keep = ledger.register(torch.zeros(10), "optim.master")
    transient = ledger.register(torch.zeros(50), "optim.grad")
    del transient
    ledger.reset_peaks()
    assert (ledger.peak("optim.grad"), ledger.peak("optim.master"), ledger.total_peak()) == (0, 40, 40)
    assert ledger.current("optim.master") == keep.nbytes, "what is still alive stays counted"


def test_tracking_files_anonymous_storages_by_phase_and_moves_registered_ones() -> None:
    ledger = MemoryLedger()
    ledger.set_tracking(True)
    x = torch.ones(64)
    with ledger.phase("forward"):
        activation = x * 2  # 256 bytes made in forward
        owned = ledger.new("grad.bucket", lambda: torch.zeros(32))
    with ledger.phase("step"):
        temporary = x + 1
        state = x.clone()
    ledger.register(state, "optim.state")
    assert ledger.current("activations") == 256
    assert ledger.current("grad.bucket") == 128 and ledger.peak("activations") == 256
    assert ledger.current("other") == 256 and ledger.peak("other") == 512
    assert ledger.current("optim.state") == 256
    del activation, temporary
    gc.collect()
    assert ledger.current("activations") == 0 and ledger.current("other") == 0
    assert ledger.current("grad.bucket") == owned.nbytes, "a registered storage outlives its phase"


def test_nested_phases_keep_one_tracker_and_the_inner_label() -> None:
    ledger = MemoryLedger()
    ledger.set_tracking(True)
    with ledger.phase("step"), ledger.phase("backward"):
        grad = torch.ones(8) * 3
    assert ledger.current("activations") == grad.nbytes  # 32: made in the inner (backward) phase


def test_report_is_a_dict_per_device_and_a_table() -> None:
    ledger = MemoryLedger()
    kept = ledger.register(torch.zeros(256, dtype=torch.bfloat16), "param.persistent")
    ledger.count_comm("all_gather", 1024, 512)
    ledger.count_comm("all_gather", 1024, 512)
    report = ledger.report(pinned={"total": {"current": 0, "peak": 4096}, "backends": {}})
    assert report == {"cpu": {"param.persistent": {"current": 512, "peak": 512}, "total": {"current": 512, "peak": 512}}}
    assert report.comm == {"all_gather": {"calls": 2, "payload_bytes": 2048, "sent_bytes": 1024}}
    assert report.as_dict()["pinned"]["total"]["peak"] == 4096
    text = str(report)
    assert re.search(r"cpu\s+param\.persistent\s+512 B \(0\.00 MiB\)\s+512 B", text)
    assert re.search(r"all_gather\s+2\s+2048 B", text)
    assert "tracking is off" in text
    assert ledger.current("param.persistent") == kept.nbytes, "reporting leaves the figures as they are"


def test_unknown_category_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown memory category 'grads'"):
        MemoryLedger().register(torch.zeros(1), "grads")


def test_see_memory_usage_prints_deepspeeds_lines(capsys: pytest.CaptureFixture[str]) -> None:
    text = see_memory_usage("after init")
    printed = capsys.readouterr().out
    assert printed.strip() == text.strip()
    lines = text.splitlines()
    assert lines[0] == "after init"
    assert re.fullmatch(r"MA [\d.]+ GB {9}Max_MA [\d.]+ GB {9}CA [\d.]+ GB {9}Max_CA \d+ GB ", lines[1])
    assert re.fullmatch(r"CPU Virtual Memory:  used = [\d.]+ GB, percent = [\d.]+%", lines[2])
    assert re.fullmatch(r"Pinned Memory:  current = [\d.]+ GB, peak = [\d.]+ GB.*", lines[3])


def test_see_memory_usage_force_false_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert see_memory_usage("quiet", force=False) is None
    assert capsys.readouterr().out == ""


def test_the_report_says_what_held_memory_when_the_total_peaked() -> None:
    ledger = MemoryLedger()
    weights = ledger.register(torch.zeros(1024), "param.persistent")  # 4 KiB, all along
    activations = [ledger.register(torch.zeros(3 * 1024), "activations") for _ in range(2)]  # 24 KiB: the peak
    del activations
    state = ledger.register(torch.zeros(2 * 1024), "optim.state")  # 8 KiB, after the peak
    report = ledger.report()
    assert report.at_peak == {"cpu": {"param.persistent": 4096, "activations": 24576}}
    assert report["cpu"]["optim.state"]["peak"] == 8192, "its own peak came after the total's"
    assert report.what_made_the_peak("cpu") == (
        "cpu peaked at 0.03 MiB: activations 86% (0.02 MiB), param.persistent 14% (0.00 MiB); activations made "
        "most of it (activation checkpointing (docs/activations.md) or a smaller micro-batch lowers it; no ZeRO "
        "stage does); `zero estimate --explain` computes what each lever saves")
    assert "what made the peak: cpu peaked at 0.03 MiB" in str(report)
    del weights, state


def test_the_report_computes_each_lever_from_the_lines_held_at_the_peak() -> None:
    held = {"activations": 8 * MiB, "optim.state": 4 * MiB, "grad.full": 2 * MiB, "param.persistent": 2 * MiB}
    setup = LeverSetup(stage=0, world_size=4, optimizer_offloaded=False, parameters_offloaded=False)
    levers = {lever.name: lever.saves for lever in measured_levers(held, setup)}
    assert levers == {
        "halve the micro-batch (activations scale with it)": 4 * MiB,
        "stage 1 (keeps 1/4 of the fp32 master and optimizer state)": 3 * MiB,
        "offload_optimizer (moves the fp32 master, its gradients and the optimizer state off the device)": 4 * MiB,
        "stage 2 (keeps 1/4 of the gradients)": int(1.5 * MiB),
        "stage 3 (keeps 1/4 of the weights between uses)": int(1.5 * MiB),
    }
    # At stage 3 with the optimizer offloaded only the micro-batch is left to pull.
    done = LeverSetup(stage=3, world_size=4, optimizer_offloaded=True, parameters_offloaded=True)
    assert [lever.name for lever in measured_levers(held, done)] == ["halve the micro-batch (activations scale with it)"]
    report = MemoryReport({}, comm={}, at_peak={"cpu": held}, setup=setup)
    text = report.what_made_the_peak("cpu")
    assert text.startswith("cpu peaked at 16.00 MiB: activations 50% (8.00 MiB)")
    assert ("each lever alone, from the lines held at this peak: halve the micro-batch (activations scale with it): "
            "-4.00 MiB (peak 12.00 MiB), offload_optimizer (moves the fp32 master, its gradients and the optimizer state off the device): -4.00 MiB "
            "(peak 12.00 MiB), stage 1 (keeps 1/4 of the fp32 master and optimizer state): -3.00 MiB (peak 13.00 MiB)") in text
    assert text.endswith("what checkpointing would save: `zero estimate --explain`")


def test_phase_peaks_say_what_each_category_held_at_each_phases_highest_total() -> None:
    ledger = MemoryLedger()
    weights = ledger.register(torch.zeros(1024), "param.persistent")  # 4 KiB, held before any phase
    with ledger.phase("forward"):
        kept = ledger.register(torch.zeros(2 * 1024), "activations")  # 8 KiB
        transient = ledger.register(torch.zeros(4 * 1024), "activations")  # 16 KiB, freed inside forward
        del transient
        with ledger.phase("backward"):  # nested: counted in the outer phase
            inner = ledger.register(torch.zeros(256), "grad.bucket")
            del inner
    with ledger.phase("step"):
        state = ledger.register(torch.zeros(512), "optim.state")  # 2 KiB
    peaks = ledger.phase_peaks()
    assert set(peaks) == {"forward", "step"}
    assert peaks["forward"]["cpu"] == {"param.persistent": 4096, "activations": 24576, "total": 28672}
    assert peaks["step"]["cpu"] == {"param.persistent": 4096, "activations": 8192, "optim.state": 2048,
                                    "total": 14336}
    with ledger.phase("backward"):  # nothing allocated inside: what is held on entry is its peak
        pass
    assert ledger.phase_peaks()["backward"]["cpu"]["total"] == 14336
    assert ledger.snapshot() == {"cpu": {"param.persistent": 4096, "activations": 8192, "optim.state": 2048,
                                         "total": 14336}}
    ledger.reset_phase_peaks()
    assert ledger.phase_peaks() == {}
    del weights, kept, state
