"""zero_offload.CPULion against a reference written from the Lion paper's update rule: to the bit on torch's
kernels, within 1e-6 (and mostly to the bit) on the fused op."""
from __future__ import annotations

import copy

import pytest
import torch

from zero_offload import CPULion
from zero_offload.optim._lists import CACHE_TILE
from optim_helpers import assert_matches, kernel, make_params, set_grads, SHAPES  # noqa: F401

# Odd sizes end in the kernels' scalar tails; the last one spans two cache tiles.
SHAPES = [(37,), (5, 7), (1000,), (3,), (CACHE_TILE + 17,)]


def reference_lion_step(param, grad, exp_avg, lr, betas, weight_decay):
    """Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", Algorithm 2, one param:

        c     = beta1 * m + (1 - beta1) * g        (interp(g, m, beta1))
        theta = theta - lr * (sign(c) + wd * theta) (decoupled weight decay, applied first)
        m     = beta2 * m + (1 - beta2) * g
    """
    beta1, beta2 = betas
    param.mul_(1 - lr * weight_decay)
    c = torch.lerp(exp_avg, grad, 1 - beta1)
    param.add_(torch.sign(c), alpha=-lr)
    exp_avg.lerp_(grad, 1 - beta2)


def run_against_reference(ours, theirs, steps=4, **hyper):
    """Step CPULion on `ours` and the reference on `theirs` (fp32 states) with the same grads."""
    optimizer = CPULion(ours, **hyper)
    exp_avgs = [torch.zeros_like(p, dtype=torch.float32) for p in theirs]
    for step in range(steps):
        set_grads([ours, theirs], seed=step)
        optimizer.step()
        for param, exp_avg in zip(theirs, exp_avgs):
            # 16-bit params: step their fp32 widening and round back, as fp32 states imply.
            widened = param.float()
            reference_lion_step(widened, param.grad.float(), exp_avg, **hyper)
            param.copy_(widened)
    return optimizer, exp_avgs


@pytest.mark.parametrize("weight_decay", [0.0, 0.5])
@pytest.mark.parametrize("betas", [(0.9, 0.99), (0.95, 0.98), (0.0, 0.0)])
def test_matches_the_paper_reference(kernel, weight_decay, betas):
    ours, theirs = make_params(), make_params()
    optimizer, exp_avgs = run_against_reference(ours, theirs, lr=1e-3, betas=betas, weight_decay=weight_decay)
    assert_matches(kernel, ours, theirs)
    assert_matches(kernel, [optimizer.state[p]["exp_avg"] for p in ours], exp_avgs)
    assert set(optimizer.state[ours[0]]) == {"step", "exp_avg"}


def test_a_zero_interpolation_leaves_the_weight_alone(kernel):
    """sign(0) = 0, as in the paper (DeepSpeed's kernel takes the sign bit and moves the weight by lr)."""
    param = torch.tensor([1.0, 1.0, 1.0])
    param.grad = torch.tensor([0.0, 2.0, -2.0])
    CPULion([param], lr=0.5, betas=(0.9, 0.99)).step()
    assert param.tolist() == [1.0, 0.5, 1.5]


@pytest.fixture
def two_threads():
    """make test runs with OMP_NUM_THREADS=1; CPULion spreads tiles over threads only with more."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def test_work_spread_over_threads_gives_the_same_result(two_threads, kernel):
    shapes = [(CACHE_TILE + 101,), *[(999,)] * 40]  # two tiles (and several op chunks), so two threads
    ours = [torch.nn.Parameter(p) for p in make_params(shapes)]  # leaves that require grad
    theirs = make_params(shapes)
    run_against_reference(ours, theirs, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.5)
    assert_matches(kernel, ours, theirs)


def test_reference_moves_each_weight_by_exactly_lr():
    """The reference is Lion: a sign update of size lr, none where the interpolation is 0."""
    param, grad, exp_avg = torch.zeros(3), torch.tensor([2.0, -3.0, 0.0]), torch.zeros(3)
    reference_lion_step(param, grad, exp_avg, lr=0.5, betas=(0.9, 0.99), weight_decay=0.0)
    assert param.tolist() == [-0.5, 0.5, 0.0]
    torch.testing.assert_close(exp_avg, 0.01 * grad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_params_with_fp32_states(kernel, dtype):
    ours, theirs = make_params(dtype=dtype), make_params(dtype=dtype)
    optimizer, exp_avgs = run_against_reference(ours, theirs, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.5)
    assert all(p.dtype == dtype for p in ours)
    assert_matches(kernel, ours, theirs)
    assert_matches(kernel, [optimizer.state[p]["exp_avg"] for p in ours], exp_avgs)


def test_16_bit_states_when_fp32_optimizer_states_is_off():
    params = make_params([(1000,)], dtype=torch.bfloat16)
    optimizer = CPULion(params, fp32_optimizer_states=False)
    set_grads([params], seed=0)
    optimizer.step()
    assert optimizer.state[params[0]]["exp_avg"].dtype == torch.bfloat16


@pytest.mark.parametrize(("chosen", "size"), [("torch", 64), ("native", 64), ("native", 37)])
def test_many_sub_group_chunks_equal_one_flat_param(monkeypatch, chosen, size):
    """torch's kernels round the same only where a cut is a multiple of 64 elements; the op, anywhere."""
    monkeypatch.setenv("ZERO_CPU_OPTIMIZER_KERNEL", chosen)
    flat, reference_flat = make_params([(10_007,)]), make_params([(10_007,)])
    chunks = list(flat[0].split(size))  # 157 or 271 params, as the engine hands sub-groups over
    hyper = dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.5)
    optimizer, reference = CPULion(chunks, **hyper), CPULion(reference_flat, **hyper)
    for step in range(3):
        set_grads([reference_flat], seed=step)
        for chunk, grad in zip(chunks, reference_flat[0].grad.split(size)):
            chunk.grad = grad.clone()
        optimizer.step()
        reference.step()
    assert torch.equal(flat[0], reference_flat[0])


def test_state_dict_round_trip(kernel):
    params = make_params([(37,), (1000,)], dtype=torch.bfloat16)
    optimizer = CPULion(params, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
    set_grads([params], seed=0)
    optimizer.step()
    resumed_params = [p.clone() for p in params]
    resumed = CPULion(resumed_params)
    resumed.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    assert resumed.param_groups[0]["betas"] == (0.9, 0.99)
    assert resumed.state[resumed_params[0]]["exp_avg"].dtype == torch.float32
    for step in range(1, 3):
        set_grads([params, resumed_params], seed=step)
        optimizer.step()
        resumed.step()
    assert all(torch.equal(a, b) for a, b in zip(params, resumed_params))


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(lr=0.0), "lr must be > 0"),
    (dict(lr=float("inf")), "lr must be a finite number"),
    (dict(betas=(0.9, 1.0)), r"betas\[1\] must be in \[0, 1\)"),
    (dict(betas=(-0.1, 0.99)), r"betas\[0\] must be in \[0, 1\)"),
    (dict(weight_decay=-0.1), "weight_decay must be >= 0"),
])
def test_bad_arguments_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CPULion(make_params([(3,)]), **kwargs)
