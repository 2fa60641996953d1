"""The default `torch` backend: Tensor.pin_memory(), a documented no-op without an accelerator."""
from __future__ import annotations

import pytest
import torch

import zero_pin

accelerator = torch.accelerator.is_available()


@pytest.fixture
def backend() -> zero_pin.PinBackend:
    return zero_pin.get_backend("torch")


def torch_stats() -> dict:
    return zero_pin.pinned_memory_stats()["backends"].get("torch", {"current": 0, "peak": 0})


@pytest.mark.skipif(accelerator, reason="the no-op applies without an accelerator")
def test_without_an_accelerator_the_tensor_comes_back_as_it_is(backend):
    tensor = torch.arange(10.0)
    before = torch_stats()
    for make_copy in (True, False):
        for match_shape in (True, False):  # both ignored on this path, as DeepSpeed documents
            assert zero_pin.pin_memory(tensor, make_copy=make_copy, match_shape=match_shape) is tensor
    assert torch_stats() == before  # nothing was locked, so nothing is counted
    assert not backend.is_pinned(tensor)
    assert backend.unpin_memory(tensor) is False
    assert "no accelerator" in backend.available()[1]


@pytest.mark.skipif(not accelerator, reason="needs an accelerator to pin")
def test_with_an_accelerator_memory_is_pinned_and_counted_while_it_lives(backend):
    tensor = torch.arange(1024.0)
    before = torch_stats()["current"]
    pinned = backend.pin_memory(tensor)
    assert pinned.is_pinned() and backend.is_pinned(pinned[3:9]) and torch.equal(pinned, tensor)
    assert torch_stats()["current"] == before + pinned.untyped_storage().nbytes()
    assert backend.pin_memory(pinned) is pinned  # already pinned: no second copy
    del pinned
    assert torch_stats()["current"] == before


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        ((1, 2), "expects a torch.Tensor, got tuple"),
        (torch.eye(2).to_sparse(), "only dense tensors can be pinned"),
        (torch.empty(2, device="meta"), "cannot copy a meta or fake tensor"),
    ],
)
def test_bad_input_fails_with_or_without_an_accelerator(backend, tensor, message):
    with pytest.raises(zero_pin.PinError, match=message):
        backend.pin_memory(tensor)


def test_meta_and_fake_tensors_are_not_pinned(backend):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(2)
    assert not backend.is_pinned(fake) and not backend.is_pinned(torch.empty(2, device="meta"))
