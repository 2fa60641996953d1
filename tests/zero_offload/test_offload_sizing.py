"""The plan an offload device is asked to check is sized with the optimizer's own state, not Adam's.

Each optimizer keeps a different number of fp32 state tensors of a parameter's size (Adam and
AdamW two, Lion and Adagrad one, SGD one with momentum and none without). The count
`optimizer_state_tensors` gives must be what zero-offload's CPU optimizers and torch's allocate,
and the engine must hand the device the placement plan's copies: master + gradients + that state per element.
With the state on NVMe the plan holds the gradients and the swap pool instead, exactly the bytes the
ledger then counts; the pool's buffers hold a budget's slice (zero_plugins.swap_slice_numel), finer than
a sub-group only for an optimizer known to step element by element.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from zero_plugins import swap_slice_numel
from zero_plugins.placement import PlanInputs, build_plan

import zero_core
from swap_helpers import direct_directory
from zero_core.offload import OffloadPlan, OptimizerCopies, ParameterCopies, SwapSettings, optimizer_state_tensors
from zero_offload import CPUAdagrad, CPUAdam, CPULion
from zero_offload._cpu_device import CpuOffloadDevice

OPTIMIZERS: dict[str, tuple[str, dict[str, Any], Any]] = {
    "adam": ("Adam", {}, lambda p: CPUAdam(p)),
    "adamw-amsgrad": ("AdamW", {"amsgrad": True}, lambda p: CPUAdam(p, amsgrad=True)),
    "lion": ("Lion", {}, lambda p: CPULion(p)),
    "adagrad": ("Adagrad", {}, lambda p: CPUAdagrad(p)),
    "sgd": ("SGD", {"lr": 0.1}, lambda p: torch.optim.SGD(p, lr=0.1)),
    "sgd-momentum": ("SGD", {"lr": 0.1, "momentum": 0.9}, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
}


@pytest.mark.parametrize("case", OPTIMIZERS)
def test_the_state_count_is_what_the_optimizer_allocates(case: str) -> None:
    name, params, make = OPTIMIZERS[case]
    param = torch.nn.Parameter(torch.randn(64))
    optimizer = make([param])
    param.grad = torch.randn(64)
    optimizer.step()
    made = [v for v in optimizer.state[param].values() if isinstance(v, torch.Tensor) and v.shape == param.shape]
    assert optimizer_state_tensors(name, params) == len(made)


def _optimizer_copies(name: str, device: str, *, pin: bool) -> OptimizerCopies:
    """The copies the placement plan puts at `device` for 1000 elements of a stage-2 partition."""
    plan = build_plan(PlanInputs(stage=2, compute_dtype="bf16", offload_optimizer=device, optimizer_pin_memory=pin,
                                 optimizer_state_tensors=optimizer_state_tensors(name, {})))
    return OptimizerCopies.from_plan(plan, elements=1000, swap=SwapSettings(buffer_count=4, buffer_numel=1000))


def test_lion_and_adagrad_plans_hold_one_state_tensor_not_adams_two() -> None:
    for name in ("Lion", "Adagrad"):
        # master 4 + gradients 4 + one fp32 state 4, per element; the gradients are pinned
        assert _optimizer_copies(name, "cpu", pin=True).sized(pin=True, alignment=1) == OffloadPlan(12_000, 4000)
        # in swap space: the master and the state; the gradients and 4 aligned buffers stay in host memory,
        # the pool's one allocation a block larger where it is not pinned (an aligned start is cut from it)
        unpinned = _optimizer_copies(name, "nvme", pin=False).sized(pin=False, alignment=4096)
        assert unpinned == OffloadPlan(4000 + 5 * 4096, 0, disk_bytes=8000)
        pinned = _optimizer_copies(name, "nvme", pin=True).sized(pin=True, alignment=4096)
        assert pinned == OffloadPlan(4000 + 4 * 4096, 4000 + 4 * 4096, 8000)
        # a pin backend that does not lock memory: the plan's pinned copies are pageable, and sized so
        assert _optimizer_copies(name, "cpu", pin=True).sized(pin=False, alignment=1) == OffloadPlan(12_000, 0)
    assert _optimizer_copies("Adam", "cpu", pin=False).sized(pin=False, alignment=1) == OffloadPlan(16_000, 0)
    # SGD without momentum keeps no state: master and gradients alone
    assert _optimizer_copies("SGD", "cpu", pin=False).sized(pin=False, alignment=1) == OffloadPlan(8000, 0)


def test_the_optimizers_plan_leaves_out_partitions_at_a_device_of_the_same_name() -> None:
    plan = build_plan(PlanInputs(stage=3, compute_dtype="bf16", offload_optimizer="cpu", offload_param="cpu",
                                 optimizer_state_tensors=2))
    copies = OptimizerCopies.from_plan(plan, elements=1000, swap=SwapSettings(buffer_count=4, buffer_numel=1000))
    assert copies.sized(pin=False, alignment=1) == OffloadPlan(16_000, 0)  # master, gradients, Adam's m and v


def test_parameter_plans_keep_max_in_cpu_in_memory() -> None:
    swap = SwapSettings(buffer_count=2, buffer_numel=100, dtype=torch.bfloat16)
    in_memory = ParameterCopies(elements=1000, dtype=torch.bfloat16, max_in_cpu=400, swap=swap, in_swap=False)
    assert in_memory.sized(pin=True, alignment=4096) == OffloadPlan(2000, 2000)
    swapped = ParameterCopies(elements=1000, dtype=torch.bfloat16, max_in_cpu=400, swap=swap, in_swap=True)
    assert swapped.sized(pin=True, alignment=4096) == OffloadPlan(800 + 2 * 4096, 800 + 2 * 4096, disk_bytes=1200)


@pytest.mark.usefixtures("solo_process_group")
@pytest.mark.parametrize(("optimizer", "state_bytes"), [("Lion", 4), ("Adagrad", 4), ("AdamW", 8)])
def test_the_engine_asks_the_cpu_device_to_check_its_optimizers_own_plan(
        monkeypatch: pytest.MonkeyPatch, optimizer: str, state_bytes: int) -> None:
    checked: list[OffloadPlan] = []
    monkeypatch.setattr(CpuOffloadDevice, "check_capacity", lambda self, plan: checked.append(plan))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 2))
    elements = sum(p.numel() for p in model.parameters())
    config = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": optimizer, "params": {"lr": 1e-3}},
              "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": False}}}
    engine, _, _, _ = zero_core.initialize(model=model, config=config)
    engine.destroy()
    assert checked == [OffloadPlan((4 + 4 + state_bytes) * elements, 0)]


class _Recorded:
    """What the engine asked the nvme device: the copies it sized and the plan it had checked."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from zero_offload.nvme._device import NvmeOffloadDevice

        self.copies: list[OptimizerCopies | ParameterCopies] = []
        self.plans: list[OffloadPlan] = []
        plan = NvmeOffloadDevice.plan

        def sizing(device: NvmeOffloadDevice, copies: OptimizerCopies | ParameterCopies) -> OffloadPlan:
            self.copies.append(copies)
            return plan(device, copies)

        monkeypatch.setattr(NvmeOffloadDevice, "plan", sizing)
        monkeypatch.setattr(NvmeOffloadDevice, "check_capacity", lambda device, checked: self.plans.append(checked))


def _nvme_engine(root: Path, optimizer: dict[str, Any] | None, client: Any = None) -> Any:
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 2, "aio": {"block_size": 4096},  # slices of whole 4 KiB blocks
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": str(root)}}}
    if optimizer is not None:
        config["optimizer"] = optimizer
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 512)  # 131,584 elements, one rank
    return zero_core.initialize(model=model, optimizer=client(model) if client else None, config=config)[0]


@pytest.mark.usefixtures("solo_process_group")
def test_the_nvme_plan_states_the_host_bytes_the_ledger_then_counts(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = _Recorded(monkeypatch)
    for root in direct_directory(tmp_path):
        engine = _nvme_engine(root, {"type": "AdamW", "params": {"lr": 1e-3}})
        engine.backward(engine(torch.randn(2, 256)).pow(2).mean())
        engine.step()
        host = {category: figures["current"] for category, figures in engine.memory_report()["host"].items()}
        engine.destroy()
    (copies,), (plan,) = recorded.copies, recorded.plans
    assert isinstance(copies, OptimizerCopies)
    # the budget: 4 buffers within 1/16 of 131,584 x 12 bytes, in whole 1024-element blocks
    assert copies.swap.buffer_numel == 6 * 1024 == swap_slice_numel(
        partition=131_584, sub_group_size=1_000_000_000, state_tensors=2, buffer_count=4, block_size=4096,
        elementwise=True)
    # the fp32 gradients and the pool, which the torch pin backend leaves unpinned here: a block over
    assert plan == OffloadPlan(4 * 131_584 + 4 * 4 * 6144 + 4096, 0, disk_bytes=12 * 131_584)
    assert plan.host_bytes == host["grad.partition"] + host["swap.buffer"]
    assert host["optim.state"] == 4 * 22, "the step counts of 22 slices, which the plan leaves out"


@pytest.mark.usefixtures("solo_process_group")
@pytest.mark.parametrize(("optimizer", "client", "sliced"), [
    ({"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}}, None, True),
    ({"type": "Adafactor", "params": {"lr": 1e-2}}, None, False),  # its step size is the whole tensor's norm
    (None, lambda model: torch.optim.AdamW(model.parameters()), True),
    (None, lambda model: lambda groups: torch.optim.AdamW(groups), False),  # unknown until built
])
def test_only_an_optimizer_known_to_step_element_by_element_is_cut_finer_than_a_sub_group(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, optimizer: dict[str, Any] | None, client: Any,
        sliced: bool) -> None:
    recorded = _Recorded(monkeypatch)
    for root in direct_directory(tmp_path):
        _nvme_engine(root, optimizer, client).destroy()
    (copies,) = recorded.copies
    assert (copies.swap.buffer_numel < 131_584) is sliced
