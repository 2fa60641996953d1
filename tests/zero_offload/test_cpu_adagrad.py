"""zero_offload.CPUAdagrad with DeepSpeedCPUAdagrad's constructor: torch's fused Adagrad to the bit on torch's
kernels, within 1e-6 (and mostly to the bit) on the fused op."""
from __future__ import annotations

import copy

import pytest
import torch

from zero_offload import CPUAdagrad
from zero_offload.optim._lists import CACHE_TILE
from optim_helpers import (assert_matches, kernel, make_params, set_grads, SHAPES, step_together,  # noqa: F401
                           step_with_widened_reference)


def assert_equal(params, others):
    assert all(torch.equal(a, b) for a, b in zip(params, others))


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_matches_torch_fused_adagrad(kernel, weight_decay):
    ours, theirs = make_params(), make_params()
    optimizer = CPUAdagrad(ours, lr=0.1, eps=1e-8, weight_decay=weight_decay)
    reference = torch.optim.Adagrad(theirs, lr=0.1, eps=1e-8, weight_decay=weight_decay, fused=True)
    step_together([optimizer, reference], [ours, theirs])
    assert_matches(kernel, ours, theirs)
    for param, other in zip(ours, theirs):
        assert_matches(kernel, [optimizer.state[param]["sum"]], [reference.state[other]["sum"]])
        assert optimizer.state[param]["step"].item() == 4


def test_close_to_torch_default_adagrad(kernel):
    # torch's default (foreach) implementation rounds differently from its fused kernel, by an ulp or so.
    ours, theirs = make_params(), make_params()
    step_together([CPUAdagrad(ours, lr=0.1, weight_decay=0.1), torch.optim.Adagrad(theirs, lr=0.1, weight_decay=0.1)],
                  [ours, theirs], steps=6)
    assert max((a - b).abs().max().item() for a, b in zip(ours, theirs)) <= 1e-6


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_params_with_fp32_states(kernel, dtype):
    """Equal to an fp32 Adagrad step of the widened param, rounded back once per step."""
    shapes = SHAPES + [(CACHE_TILE + 5,)]
    ours, theirs = make_params(shapes, dtype), make_params(shapes, dtype)
    masters = [p.float() for p in theirs]
    optimizer = CPUAdagrad(ours, lr=0.1, weight_decay=0.1)
    reference = torch.optim.Adagrad(masters, lr=0.1, weight_decay=0.1, fused=True)
    step_with_widened_reference(optimizer, reference, ours, theirs, masters)
    assert_matches(kernel, ours, theirs)
    for param, master in zip(ours, masters):
        assert optimizer.state[param]["sum"].dtype == torch.float32
        assert_matches(kernel, [optimizer.state[param]["sum"]], [reference.state[master]["sum"]])


def test_16_bit_states_when_fp32_optimizer_states_is_off(kernel):
    """16-bit states step on torch's fused kernel, whichever kernel is chosen: the same bits as torch."""
    ours, theirs = make_params(dtype=torch.bfloat16), make_params(dtype=torch.bfloat16)
    optimizer = CPUAdagrad(ours, lr=0.1, fp32_optimizer_states=False)
    step_together([optimizer, torch.optim.Adagrad(theirs, lr=0.1, fused=True)], [ours, theirs])
    assert_equal(ours, theirs)
    assert optimizer.state[ours[0]]["sum"].dtype == torch.bfloat16


@pytest.mark.parametrize(("chosen", "size"), [("torch", 64), ("native", 64), ("native", 37)])
def test_many_sub_group_chunks_equal_one_flat_param(monkeypatch, chosen, size):
    """torch's kernel rounds the same only where a cut is a multiple of 64 elements; the op, anywhere."""
    monkeypatch.setenv("ZERO_CPU_OPTIMIZER_KERNEL", chosen)
    flat, reference_flat = make_params([(10_007,)]), make_params([(10_007,)])
    chunks = list(flat[0].split(size))  # 157 or 271 params, as the engine hands sub-groups over
    optimizer, reference = CPUAdagrad(chunks, lr=0.1), CPUAdagrad(reference_flat, lr=0.1)
    for step in range(3):
        set_grads([reference_flat], seed=step)
        for chunk, grad in zip(chunks, reference_flat[0].grad.split(size)):
            chunk.grad = grad.clone()
        optimizer.step()
        reference.step()
    assert torch.equal(flat[0], reference_flat[0])


def test_state_dict_round_trip(kernel):
    params = make_params(dtype=torch.bfloat16)
    optimizer = CPUAdagrad(params, lr=0.1, weight_decay=0.1)
    step_together([optimizer], [params], steps=2)
    resumed_params = [p.clone() for p in params]
    resumed = CPUAdagrad(resumed_params, lr=1.0)
    resumed.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    assert resumed.param_groups[0]["lr"] == 0.1
    assert resumed.state[resumed_params[0]]["sum"].dtype == torch.float32
    step_together([optimizer, resumed], [params, resumed_params], steps=2)
    assert_equal(params, resumed_params)


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(lr=0.0), "lr must be > 0"),
    (dict(lr=float("nan")), "lr must be a finite number"),
    (dict(eps=-1e-10), "eps must be > 0"),
    (dict(weight_decay=-1.0), "weight_decay must be >= 0"),
    (dict(amsgrad=True), "amsgrad must be False"),
])
def test_bad_arguments_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CPUAdagrad(make_params(), **kwargs)
