"""StorageTracker: exact live bytes of storages created inside the region."""
from __future__ import annotations

import pytest
import torch
from zero_core.memory import StorageTracker, active_tracker

MiB = 2**20


def test_views_share_their_base_and_frees_are_seen():
    with StorageTracker() as tracker:
        base = torch.ones(MiB // 4)  # 1 MiB of fp32
        views = [base[:10], base.view(2, -1), base.t() if base.dim() == 2 else base[1:]]
        assert tracker.current_bytes("cpu") == MiB
        doubled = base * 2
        assert tracker.current_bytes("cpu") == 2 * MiB
        del doubled
        assert tracker.current_bytes("cpu") == MiB
        assert tracker.peak_bytes("cpu") == 2 * MiB
        del base, views
        assert tracker.current_bytes("cpu") == 0


def test_tensors_saved_by_autograd_stay_counted_until_backward():
    weight = torch.randn(256, 256, requires_grad=True)
    with StorageTracker() as tracker:
        x = torch.randn(64, 256)
        hidden = torch.tanh(x @ weight)  # tanh saves its output for backward
        loss = hidden.sum()
        del hidden
        held = tracker.current_bytes("cpu")
        # x (64x256) + matmul output (64x256, consumed by tanh and freed) + tanh output (saved) + loss
        assert held == 2 * 64 * 256 * 4 + 4
        loss.backward()
        del loss
        # the saved tanh output died; weight.grad (256x256) appeared
        assert tracker.current_bytes("cpu") == 64 * 256 * 4 + 256 * 256 * 4


def test_meta_tensors_are_not_counted():
    with StorageTracker() as tracker:
        torch.empty(10**9, device="meta")
        assert tracker.current_bytes("cpu") == 0
        assert tracker.current_bytes("meta") == 0


def test_listener_sees_each_new_storage_once():
    seen = []
    with StorageTracker() as tracker:
        tracker.add_listener(lambda storage, device: seen.append((storage.nbytes(), device)))
        a = torch.zeros(10)
        a.view(2, 5)
        a.add_(1)  # in place: no new storage
        b = torch.zeros(3, dtype=torch.float64)
    assert seen == [(40, "cpu"), (24, "cpu")]
    del a, b


def test_trackers_nest_and_must_exit_in_order():
    outer = StorageTracker()
    with outer:
        assert active_tracker() is outer
        with StorageTracker() as inner:
            assert active_tracker() is inner
        assert active_tracker() is outer
    assert active_tracker() is None


def test_exiting_out_of_order_is_refused():
    first, second = StorageTracker(), StorageTracker()
    first.__enter__()
    second.__enter__()
    with pytest.raises(RuntimeError, match="reverse order"):
        first.__exit__(None, None, None)
    second.__exit__(None, None, None)
    first.__exit__(None, None, None)
