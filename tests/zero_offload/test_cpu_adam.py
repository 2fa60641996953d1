"""zero_offload.CPUAdam with DeepSpeedCPUAdam's constructor: torch's fused Adam/AdamW to the bit on torch's
kernels, within 1e-6 (and mostly to the bit) on the fused op."""
from __future__ import annotations

import copy

import pytest
import torch

from zero_offload import CPUAdam
from zero_offload.optim._lists import CACHE_TILE
from optim_helpers import (assert_matches, kernel, make_params, set_grads, SHAPES, step_together,  # noqa: F401
                           step_with_widened_reference)

STATE_NAMES = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step")


def assert_same_state(ours, theirs, params, their_params, kernel="torch"):
    for param, their_param in zip(params, their_params):
        mine, other = ours.state[param], theirs.state[their_param]
        assert set(mine) == set(other)
        for name in mine:
            assert_matches(kernel, [mine[name]], [other[name]])


@pytest.mark.parametrize("adamw_mode", [True, False])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_matches_torch_fused_adam(kernel, adamw_mode, weight_decay, amsgrad):
    ours, theirs = make_params(), make_params()
    reference = torch.optim.AdamW if adamw_mode else torch.optim.Adam
    optimizers = [
        CPUAdam(ours, lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=weight_decay, amsgrad=amsgrad,
                adamw_mode=adamw_mode),
        reference(theirs, lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=weight_decay, amsgrad=amsgrad,
                  fused=True),
    ]
    step_together(optimizers, [ours, theirs])
    assert_matches(kernel, ours, theirs)
    assert_same_state(*optimizers, ours, theirs, kernel=kernel)


@pytest.mark.parametrize("adamw_mode", [True, False])
def test_close_to_torch_default_adam(kernel, adamw_mode):
    # torch's default (foreach) implementation rounds differently from its fused kernel, by an ulp or so.
    ours, theirs = make_params(), make_params()
    reference = torch.optim.AdamW if adamw_mode else torch.optim.Adam
    step_together([CPUAdam(ours, weight_decay=0.1, adamw_mode=adamw_mode), reference(theirs, weight_decay=0.1)],
                  [ours, theirs], steps=6)
    assert max((a - b).abs().max().item() for a, b in zip(ours, theirs)) <= 1e-6


def reference_adam_without_bias_correction(param, grad, state, lr, betas, eps, weight_decay, adamw_mode, amsgrad):
    """Adam (Kingma & Ba, Algorithm 1) with m_hat = m and v_hat = v."""
    beta1, beta2 = betas
    if adamw_mode:
        param.mul_(1 - lr * weight_decay)
    else:
        grad = grad + weight_decay * param
    state["m"].mul_(beta1).add_(grad, alpha=1 - beta1)
    state["v"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    v = state["v"]
    if amsgrad:
        torch.maximum(state["v_max"], v, out=state["v_max"])
        v = state["v_max"]
    param.addcdiv_(state["m"], v.sqrt().add_(eps), value=-lr)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("adamw_mode", [True, False])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_bias_correction_false_matches_a_reference(kernel, dtype, adamw_mode, amsgrad):
    hyper = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    ours, theirs = make_params(dtype=dtype), make_params(dtype=dtype)
    optimizer = CPUAdam(ours, bias_correction=False, adamw_mode=adamw_mode, amsgrad=amsgrad, **hyper)
    states = [{name: torch.zeros_like(p) for name in ("m", "v", "v_max")} for p in theirs]
    for step in range(5):
        set_grads([ours, theirs], seed=step)
        optimizer.step()
        for param, state in zip(theirs, states):
            reference_adam_without_bias_correction(param, param.grad, state, adamw_mode=adamw_mode, amsgrad=amsgrad,
                                                   **hyper)
    # The same formula in another order of operations: equal up to rounding.
    tolerance = dict(rtol=1e-6, atol=1e-7) if dtype == torch.float32 else dict(rtol=1e-14, atol=1e-15)
    for param, reference in zip(ours, theirs):
        torch.testing.assert_close(param, reference, **tolerance)
    assert optimizer.state[ours[0]]["step"].item() == 5  # the count goes on, only the correction is off

    corrected = make_params(dtype=dtype)
    with_correction = CPUAdam(corrected, adamw_mode=adamw_mode, amsgrad=amsgrad, **hyper)
    step_together([with_correction], [corrected], steps=5)
    assert not torch.allclose(corrected[0], ours[0], rtol=1e-3, atol=0)  # the option does change the step


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_16_bit_params_with_fp32_states(kernel, dtype, amsgrad):
    """An fp32 AdamW step of the widened param, rounded back once per step."""
    check_16_bit_params_with_fp32_states(kernel, dtype, amsgrad)


def test_16_bit_params_with_fp32_states_on_two_threads(kernel):
    """torch's widening batches are sized by the thread count, the op's chunks shared (make test runs on one)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        check_16_bit_params_with_fp32_states(kernel, torch.bfloat16, amsgrad=False)
    finally:
        torch.set_num_threads(before)


def check_16_bit_params_with_fp32_states(kernel, dtype, amsgrad):
    shapes = SHAPES + [(CACHE_TILE + 5,)]
    ours, theirs = make_params(shapes, dtype), make_params(shapes, dtype)
    masters = [p.float() for p in theirs]
    optimizer = CPUAdam(ours, lr=1e-2, weight_decay=0.1, amsgrad=amsgrad)
    reference = torch.optim.AdamW(masters, lr=1e-2, weight_decay=0.1, amsgrad=amsgrad, fused=True)
    step_with_widened_reference(optimizer, reference, ours, theirs, masters)
    assert all(p.dtype == dtype for p in ours)
    assert_matches(kernel, ours, theirs)
    assert optimizer.state[ours[0]]["exp_avg"].dtype == torch.float32
    assert_same_state(optimizer, reference, ours, masters, kernel=kernel)


def test_16_bit_states_when_fp32_optimizer_states_is_off(kernel):
    """16-bit states step on torch's fused kernel, whichever kernel is chosen: the same bits as torch."""
    ours, theirs = make_params(dtype=torch.bfloat16), make_params(dtype=torch.bfloat16)
    optimizers = [CPUAdam(ours, lr=1e-2, weight_decay=0.1, fp32_optimizer_states=False),
                  torch.optim.AdamW(theirs, lr=1e-2, weight_decay=0.1, fused=True)]
    step_together(optimizers, [ours, theirs])
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    assert optimizers[0].state[ours[0]]["exp_avg"].dtype == torch.bfloat16
    assert_same_state(*optimizers, ours, theirs)


def sub_groups(flat, size):
    """A flat buffer as contiguous chunks of at most `size` elements, as the engine hands them over."""
    return list(flat.split(size))


@pytest.mark.parametrize(("chosen", "size"), [("torch", 64), ("native", 64), ("native", 37)])
def test_many_sub_group_chunks_equal_one_flat_param(monkeypatch, chosen, size):
    """torch's kernels round the same only where a cut is a multiple of 64 elements; the op, anywhere."""
    monkeypatch.setenv("ZERO_CPU_OPTIMIZER_KERNEL", chosen)
    flat, reference_flat = make_params([(10_007,)]), make_params([(10_007,)])
    chunks = sub_groups(flat[0], size)  # 157 or 271 params, one kernel call
    optimizer, reference = CPUAdam(chunks, lr=1e-2, weight_decay=0.1), CPUAdam(reference_flat, lr=1e-2, weight_decay=0.1)
    for step in range(3):
        set_grads([reference_flat], seed=step)
        for chunk, grad in zip(chunks, sub_groups(reference_flat[0].grad, size)):
            chunk.grad = grad.clone()
        optimizer.step()
        reference.step()
    assert len(optimizer.state) == len(chunks)
    assert torch.equal(flat[0], reference_flat[0])
    assert torch.equal(torch.cat([optimizer.state[c]["exp_avg_sq"] for c in chunks]),
                       reference.state[reference_flat[0]]["exp_avg_sq"])


def test_stepping_one_sub_group_at_a_time_like_deepspeeds_engine(kernel):
    """DeepSpeed's stage 3 points the group at one sub-group's fp32 partition, steps, and moves on."""
    flat, reference_flat = make_params([(1000,)]), make_params([(1000,)])
    chunks = sub_groups(flat[0], 320)  # cut at multiples of 64: the same bits as the whole
    optimizer, reference = CPUAdam(chunks, lr=1e-2), CPUAdam(reference_flat, lr=1e-2)
    for step in range(3):
        set_grads([reference_flat], seed=step)
        for chunk, grad in zip(chunks, sub_groups(reference_flat[0].grad, 320)):
            chunk.grad = grad.clone()
            optimizer.param_groups[0]["params"] = [chunk]
            optimizer.step()
        reference.step()
    assert torch.equal(flat[0], reference_flat[0])
    assert all(optimizer.state[c]["step"].item() == 3 for c in chunks)


def test_params_without_grads_are_skipped():
    params = make_params()
    optimizer = CPUAdam(params)
    before = params[1].clone()
    set_grads([params], seed=0)
    params[1].grad = None
    optimizer.step()
    assert torch.equal(params[1], before) and params[1] not in optimizer.state


def test_closure_is_called_with_grad_enabled_and_its_loss_returned():
    param = torch.zeros(3, requires_grad=True)
    optimizer = CPUAdam([param])

    def closure():
        optimizer.zero_grad()
        loss = (param - 1).square().sum()
        loss.backward()
        return loss

    assert optimizer.step(closure).item() == 3.0
    assert torch.all(param > 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_state_dict_round_trip(kernel, dtype):
    params = make_params(dtype=dtype)
    optimizer = CPUAdam(params, lr=1e-2, weight_decay=0.1, amsgrad=True)
    step_together([optimizer], [params], steps=2)
    saved = copy.deepcopy(optimizer.state_dict())

    resumed_params = [p.clone() for p in params]
    resumed = CPUAdam(resumed_params, lr=1.0)  # hyperparameters come from the state dict
    resumed.load_state_dict(saved)
    assert resumed.state[resumed_params[0]]["exp_avg"].dtype == torch.float32  # not cast to the param's bf16
    step_together([optimizer, resumed], [params, resumed_params], steps=2)
    assert all(torch.equal(a, b) for a, b in zip(params, resumed_params))
    assert_same_state(optimizer, resumed, params, resumed_params)


def test_loads_a_deepspeed_state_dict_with_int_steps():
    params = make_params()
    optimizer = CPUAdam(params)
    step_together([optimizer], [params], steps=1)
    saved = copy.deepcopy(optimizer.state_dict())
    for state in saved["state"].values():
        state["step"] = 1  # DeepSpeedCPUAdam counts in a Python int
    resumed_params = [p.clone() for p in params]
    resumed = CPUAdam(resumed_params)
    resumed.load_state_dict(saved)
    step_together([resumed], [resumed_params], steps=1)
    assert all(s["step"].dtype == torch.float32 and s["step"].item() == 2 for s in resumed.state.values())


def test_loads_a_torch_adamw_state_dict(kernel):
    ours, theirs = make_params(), make_params()
    reference = torch.optim.AdamW(theirs, lr=1e-2, fused=True)
    step_together([reference], [theirs], steps=2)
    for a, b in zip(ours, theirs):
        a.copy_(b)
    optimizer = CPUAdam(ours)
    # A copy, as from a checkpoint: like torch's, load_state_dict keeps the tensors it is given.
    optimizer.load_state_dict(copy.deepcopy(reference.state_dict()))
    step_together([optimizer, reference], [ours, theirs], steps=2)
    assert_matches(kernel, ours, theirs)


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(lr=0.0), "lr must be > 0"),
    (dict(lr=-1e-3), "lr must be > 0"),
    (dict(lr=float("nan")), "lr must be a finite number"),
    (dict(lr=float("inf")), "lr must be a finite number"),
    (dict(lr="1e-3"), "lr must be a finite number"),
    (dict(betas=(1.0, 0.999)), r"betas\[0\] must be in \[0, 1\)"),
    (dict(betas=(0.9, -0.1)), r"betas\[1\] must be in \[0, 1\)"),
    (dict(betas=(0.9,)), "betas must be a pair"),
    (dict(eps=0.0), "eps must be > 0"),
    (dict(weight_decay=-0.1), "weight_decay must be >= 0"),
])
def test_bad_arguments_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CPUAdam(make_params(), **kwargs)


def test_a_bad_param_group_override_is_rejected():
    first, second = make_params(), make_params()
    with pytest.raises(ValueError, match="lr must be > 0"):
        CPUAdam([{"params": first}, {"params": second, "lr": -1.0}])


@pytest.mark.parametrize(("param", "message"), [
    (torch.empty(3, device="meta"), "step CPU tensors"),
    (torch.zeros(3, dtype=torch.int64), "floating point"),
    (torch.zeros(4, 4).t(), "contiguous"),
])
def test_bad_params_are_rejected(param, message):
    with pytest.raises(ValueError, match=message):
        CPUAdam([param])

