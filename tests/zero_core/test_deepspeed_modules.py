"""DeepSpeed's modules at their paths under zero_core (`deepspeed.X.Y` is `zero_core.X.Y`): the optimizers of
`ops`, stage 3's `runtime.zero.partition_parameters`, `compression.helper`, `utils`' logging, and the
accelerator calls DeepSpeed-Chat makes (docs/integrations.md, "DeepSpeed names")."""
from __future__ import annotations

import importlib
import logging
import os
import subprocess
import sys
from typing import Any

import pytest
import torch
from zero_plugins import ZeroError

from multirank import run_ranks


@pytest.mark.parametrize(("module", "names"), [
    ("zero_core.ops.adam", ["FusedAdam", "DeepSpeedCPUAdam"]),
    ("zero_core.ops.adagrad", ["DeepSpeedCPUAdagrad"]),
    ("zero_core.ops.lion", ["DeepSpeedCPULion"]),
    ("zero_core.runtime.zero.partition_parameters", ["ZeroParamStatus", "GatheredParameters", "Init",
                                                      "zero_wrapper_for_fp_tensor_constructor", "_orig_torch_arange"]),
    ("zero_core.compression.helper", ["recursive_getattr", "recursive_setattr"]),
    ("zero_core.utils", ["logger", "log_dist", "zero_to_fp32"]),
])
def test_each_module_is_at_deepspeeds_path(module: str, names: list[str]) -> None:
    imported = importlib.import_module(module)
    assert [name for name in names if not hasattr(imported, name)] == []


def test_the_subpackages_are_attributes_after_import_zero_core() -> None:
    import zero_core as deepspeed

    assert deepspeed.ops.adam.FusedAdam.__module__ == "zero_core.ops.adam._fused"
    assert deepspeed.runtime.zero.partition_parameters.Init is deepspeed.zero.Init
    assert deepspeed.compression.helper.recursive_getattr.__module__ == "zero_core.compression.helper"


def _adam_steps(optimizer_class: type[torch.optim.Optimizer], **kwargs: Any) -> tuple[list[torch.Tensor], Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    optimizer = optimizer_class(model.parameters(), **kwargs)
    for step in range(3):
        loss = model(torch.full((2, 4), float(step + 1))).square().sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()], optimizer


def test_fused_adam_steps_as_torchs_adamw_exactly() -> None:
    from zero_core.ops.adam import FusedAdam

    ours, optimizer = _adam_steps(FusedAdam, lr=0.01, weight_decay=0.1)
    theirs, _ = _adam_steps(torch.optim.AdamW, lr=0.01, weight_decay=0.1, foreach=True)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    # On the CPU, torch's foreach kernel; DeepSpeed's weight decay default (0) is kept when not given.
    assert (optimizer.param_groups[0]["foreach"], optimizer.param_groups[0]["fused"]) == (True, None)
    assert FusedAdam([torch.nn.Parameter(torch.zeros(1))]).param_groups[0]["weight_decay"] == 0.0


def test_fused_adam_without_adam_w_mode_is_torchs_adam() -> None:
    from zero_core.ops.adam import FusedAdam

    ours, _ = _adam_steps(FusedAdam, lr=0.01, weight_decay=0.1, adam_w_mode=False)
    theirs, _ = _adam_steps(torch.optim.Adam, lr=0.01, weight_decay=0.1, foreach=True)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


def test_fused_adam_set_grad_none() -> None:
    from zero_core.ops.adam import FusedAdam

    weight = torch.nn.Parameter(torch.ones(2))
    for set_grad_none, expected in ((True, None), (False, [0.0, 0.0])):
        optimizer = FusedAdam([weight], set_grad_none=set_grad_none)
        weight.grad = torch.ones(2)
        optimizer.zero_grad()
        assert (weight.grad if weight.grad is None else weight.grad.tolist()) == expected


def test_the_cpu_optimizers_are_zero_offloads_and_step() -> None:
    from zero_offload.optim import CPUAdagrad, CPUAdam, CPULion

    from zero_core.ops.adagrad import DeepSpeedCPUAdagrad
    from zero_core.ops.adam import DeepSpeedCPUAdam
    from zero_core.ops.lion import DeepSpeedCPULion

    assert (DeepSpeedCPUAdam, DeepSpeedCPUAdagrad, DeepSpeedCPULion) == (CPUAdam, CPUAdagrad, CPULion)
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = DeepSpeedCPUAdam([weight], lr=0.1, adamw_mode=True)  # accelerate's keyword
    weight.grad = torch.tensor([1.0, -1.0, 0.0])
    optimizer.step()
    # Adam's first step moves each element by lr * sign(grad), nothing where the grad is 0.
    torch.testing.assert_close(weight.detach(), torch.tensor([0.9, 1.1, 1.0]), rtol=0, atol=1e-6)


def test_without_zero_offload_the_cpu_optimizer_is_one_error_naming_it() -> None:
    code = ("from zero_plugins import ZeroError\n"
            "import zero_core.ops.adam as adam\n"
            "adam.FusedAdam\n"
            "try:\n    adam.DeepSpeedCPUAdam\nexcept ZeroError as error:\n    print(error)\n")
    environment = {**os.environ, "ZERO_DISABLE_PLUGINS": "offload"}
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=120,
                          check=True)
    assert done.stdout.strip() == (
        "zero_core.ops.adam.DeepSpeedCPUAdam is zero-offload's CPU optimizer, from the cpu offload device: "
        "offload device 'cpu' is not available: zero-offload is installed but blocked by "
        "ZERO_DISABLE_PLUGINS=offload; devices available: none")


def test_fused_lion_is_refused_naming_it() -> None:
    import zero_core.ops.lion as lion

    with pytest.raises(ZeroError, match=r"^zero_core\.ops\.lion\.FusedLion is not supported: torch has no fused"):
        lion.FusedLion
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        lion.Nothing


def test_zero_param_status_has_deepspeeds_values_and_is_stage3s() -> None:
    from zero_core.runtime.zero.partition_parameters import ZeroParamStatus
    from zero_core.stage3._param_status import ZeroParamStatus as stage3s

    assert ZeroParamStatus is stage3s
    assert {status.name: status.value for status in ZeroParamStatus} == {
        "AVAILABLE": 1, "NOT_AVAILABLE": 2, "INFLIGHT": 3}


def test_the_tensor_constructor_wrapper_is_deepspeeds() -> None:
    from zero_core.runtime.zero import partition_parameters as pp

    assert pp._orig_torch_arange is torch.arange
    ones = pp.zero_wrapper_for_fp_tensor_constructor(torch.ones, torch.bfloat16, torch.device("cpu"))
    arange = pp.zero_wrapper_for_fp_tensor_constructor(pp._orig_torch_arange, torch.float16)
    assert ones(2).dtype == torch.bfloat16  # floating results cast
    assert arange(3).dtype == torch.int64  # integers kept
    assert arange(3.0).tolist() == [0.0, 1.0, 2.0] and arange(3.0).dtype == torch.float16
    kept = pp.zero_wrapper_for_fp_tensor_constructor(torch.zeros, None, torch.device("meta"))
    assert (kept(2).dtype, kept(2).device.type, kept(2, device="cpu").device.type) == (torch.float32, "meta", "cpu")


def test_recursive_getattr_and_setattr_follow_dots() -> None:
    from zero_core.compression.helper import recursive_getattr, recursive_setattr

    model = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    assert recursive_getattr(model, "0.0") is model[0][0]
    assert recursive_getattr(model, "0.0.weight") is model[0][0].weight
    replacement = torch.nn.Identity()
    recursive_setattr(model, "0.0", replacement)
    assert model[0][0] is replacement and dict(model.named_modules())["0.0"] is replacement
    with pytest.raises(AttributeError, match=r"^'0\.lora\.weight': Sequential has no attribute 'lora'$"):
        recursive_getattr(model, "0.lora.weight")


def test_the_cpu_accelerator_ignores_the_device_index_as_deepspeeds() -> None:
    from zero_core.accelerator.cpu import CpuAccelerator

    accelerator = CpuAccelerator()
    accelerator.set_device(1)  # DeepSpeed-Chat calls set_device(local_rank) on every rank
    assert (accelerator.current_device(), accelerator.device_name(1), accelerator.current_device_name()) == (
        0, "cpu", "cpu")
    assert torch.device(accelerator.device_name(), 1) == torch.device("cpu", 1)
    accelerator.manual_seed_all(11)
    first = torch.rand(2)
    accelerator.manual_seed_all(11)
    assert torch.equal(first, torch.rand(2))


def test_log_dist_before_the_process_group_logs_on_every_process(caplog: pytest.LogCaptureFixture) -> None:
    from zero_core.utils import log_dist

    with caplog.at_level(logging.INFO, logger="zero_core"):
        log_dist("hello", ranks=[0])
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [("zero_core", logging.INFO,
                                                                               "[Rank -1] hello")]


def _log_dist(rank: int, world_size: int) -> list[str]:
    import torch.distributed as dist

    from zero_core.utils import log_dist, logger

    dist.init_process_group("gloo")
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(f"{record.levelname} {record.getMessage()}")

    logger.addHandler(Keep())
    logger.setLevel(logging.INFO)
    log_dist("first", ranks=[0])
    log_dist("none")  # DeepSpeed: no ranks listed, no rank logs
    log_dist("all", ranks=[-1], level=logging.WARNING)
    log_dist("second", ranks=[1])
    dist.destroy_process_group()
    return seen


def test_log_dist_logs_on_the_listed_ranks_only() -> None:
    assert run_ranks(_log_dist, 2, timeout=60) == [
        ["INFO [Rank 0] first", "WARNING [Rank 0] all"],
        ["WARNING [Rank 1] all", "INFO [Rank 1] second"],
    ]
