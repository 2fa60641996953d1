"""The native backend, for real: posix_memalign + mlock through the C++ op built for this session."""
from __future__ import annotations

import gc
import re
import sys
import threading

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import zero_pin
from zero_pin._memlock import locked_bytes

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmLck from /proc")
PAGE = 4096


@pytest.fixture(autouse=True)
def no_pin_cache(monkeypatch):
    """Here every pin locks a fresh block and every release frees it: test_pin_cache.py covers the cache."""
    monkeypatch.setenv("ZERO_PIN_CACHE_BYTES", "0")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64])
def test_copy_keeps_values_shape_and_dtype(native, dtype):
    source = torch.arange(24).reshape(2, 3, 4).to(dtype)
    pinned = native.pin_memory(source)
    assert pinned.shape == source.shape and pinned.dtype == dtype and pinned.is_contiguous()
    assert torch.equal(pinned, source)
    assert pinned.data_ptr() != source.data_ptr()
    assert native.is_pinned(pinned) and not native.is_pinned(source)


def test_copy_of_a_strided_source_and_flat_result(native):
    source = torch.arange(12.0).reshape(3, 4).t()
    assert torch.equal(native.pin_memory(source), source)
    flat = native.pin_memory(source, match_shape=False)
    assert flat.shape == (12,) and torch.equal(flat, source.reshape(-1))


def test_without_copy_gives_a_buffer_of_as_many_elements(native):
    template = torch.empty(5, 7, device="meta", dtype=torch.float16)  # a meta template is enough
    shaped = native.pin_memory(template, make_copy=False)
    flat = native.pin_memory(template, make_copy=False, match_shape=False)
    assert shaped.shape == (5, 7) and flat.shape == (35,) and flat.dtype == torch.float16
    flat.fill_(3)
    assert native.is_pinned(shaped) and native.is_pinned(flat) and flat.sum().item() == 105


def test_the_result_never_joins_the_autograd_graph(native):
    pinned = native.pin_memory(torch.ones(3, requires_grad=True))
    assert not pinned.requires_grad and pinned.grad_fn is None


def test_views_slices_and_data_redirects_are_pinned(native):
    pinned = native.pin_memory(torch.arange(64.0).reshape(8, 8))
    redirected = torch.zeros(1)
    redirected.data = pinned[2]
    for view in (pinned[3], pinned[1:4, 2:5], pinned.t(), pinned.view(torch.int32), pinned.detach(),
                 pinned.reshape(-1)[10:], redirected, pinned[8:]):
        assert native.is_pinned(view)
    assert not native.is_pinned(pinned.clone())
    assert not native.is_pinned(torch.empty(8, device="meta"))
    with FakeTensorMode():
        fake = torch.empty(8)
    assert not native.is_pinned(fake)
    assert not native.is_pinned("not a tensor")


def test_empty_tensor(native):
    pinned = native.pin_memory(torch.empty(0, 3))
    assert pinned.shape == (0, 3) and native.is_pinned(pinned)


@linux_only
def test_pinned_bytes_are_counted_when_the_pages_are_locked(native, native_locked):
    kernel, ours = locked_bytes(), native_locked()
    pinned = native.pin_memory(torch.ones(10_000, dtype=torch.uint8))  # rounds up to whole pages
    size = (10_000 + PAGE - 1) // PAGE * PAGE
    assert locked_bytes() - kernel == size
    assert native_locked() - ours == size
    assert zero_pin.pinned_memory_stats()["backends"]["native"]["peak"] >= native_locked()
    del pinned


@linux_only
def test_memory_is_freed_when_the_last_view_dies(native, native_locked):
    kernel, ours = locked_bytes(), native_locked()
    pinned = native.pin_memory(torch.ones(PAGE, dtype=torch.float32))
    view, detached = pinned[100:200], pinned.detach()
    weight = torch.ones(PAGE, requires_grad=True)
    loss = (weight * pinned).sum()  # autograd saves `pinned`: only C++ holds it then
    del pinned, view, detached
    gc.collect()
    assert native_locked() - ours == 4 * PAGE and locked_bytes() - kernel == 4 * PAGE
    del loss
    gc.collect()
    assert native_locked() == ours and locked_bytes() == kernel


@linux_only
def test_unpin_releases_the_lock_at_once_and_the_tensor_stays_readable(native, native_locked):
    source = torch.arange(PAGE, dtype=torch.float64)
    kernel, ours = locked_bytes(), native_locked()
    pinned = native.pin_memory(source)
    assert native.unpin_memory(pinned[5:9]) is True  # a view unpins the whole allocation
    assert locked_bytes() == kernel and native_locked() == ours
    assert not native.is_pinned(pinned)
    assert torch.equal(pinned, source)  # the memory is still there: no use after free
    pinned.add_(1)
    assert torch.equal(pinned, source + 1)
    assert native.unpin_memory(pinned) is False
    del pinned
    gc.collect()
    assert native_locked() == ours  # counted off once, not again when freed


def test_unpin_of_memory_it_did_not_pin(native):
    assert native.unpin_memory(torch.ones(3)) is False
    assert native.unpin_memory(torch.empty(3, device="meta")) is False


@pytest.mark.parametrize(
    ("tensor", "make_copy", "message"),
    [
        ([1.0, 2.0], True, "expects a torch.Tensor, got list"),
        (torch.eye(3).to_sparse(), True, "only dense tensors can be pinned; call .to_dense()"),
        (torch.empty(3, device="meta"), True, "pass make_copy=False"),
    ],
)
def test_bad_input_is_one_line_with_the_fix(native, tensor, make_copy, message):
    with pytest.raises(zero_pin.PinError, match=re.escape(message)) as error:
        native.pin_memory(tensor, make_copy=make_copy)
    assert "\n" not in str(error.value)


def test_threads_share_one_range_manager_and_one_account(native, native_locked):
    before = native_locked()

    def work() -> None:
        for _ in range(50):
            pinned = native.pin_memory(torch.ones(100))
            assert native.is_pinned(pinned[10:])
            assert native.unpin_memory(pinned)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    gc.collect()
    assert native_locked() == before
