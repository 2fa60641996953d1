"""The placement plan: which copies exist, where and when, for each stage and offload choice (no torch)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from zero_plugins.ds_config import ConfigError, load_config
from zero_plugins.placement import (
    Copy,
    Extent,
    Lifetime,
    Location,
    PlanInputs,
    StepGranularity,
    build_plan,
    plan_for_config,
)


def _plan(**inputs: object):  # type: ignore[no-untyped-def]
    return build_plan(PlanInputs(**{"stage": 3, "compute_dtype": "bf16", "world_size": 4, **inputs}))  # type: ignore[arg-type]


def test_the_plan_needs_no_torch() -> None:
    code = "import sys, zero_plugins.placement; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_stage3_in_16_bit_keeps_no_partition_and_fp32_gradients() -> None:
    plan = _plan()
    assert plan.params_cast_from_master and not plan.has(Copy.PARAM_PARTITION) and not plan.has(Copy.STEP_GRAD)
    grads = plan.get(Copy.GRAD_PARTITION)
    assert grads is not None and (grads.dtype, grads.location, grads.extent) == ("fp32", Location.DEVICE,
                                                                                  Extent.PARTITION)
    assert plan.step_granularity is StepGranularity.SUB_GROUP
    assert plan.bytes_per_parameter_at_step() == 16  # master 4 + gradients 4 + Adam 8, as FSDP2


def test_step_in_backward_leaves_master_and_state() -> None:
    plan = _plan(step_in_backward=True)
    grads = plan.get(Copy.GRAD_PARTITION)
    assert grads is not None and grads.extent is Extent.UNIT and grads.lifetime is Lifetime.DURING_BACKWARD
    assert plan.step_granularity is StepGranularity.IN_BACKWARD
    assert plan.bytes_per_parameter_at_step() == 12


def test_offloaded_params_keep_the_16_bit_copy_on_the_host() -> None:
    plan = _plan(offload_param="cpu", param_pin_memory=True)
    partition = plan.get(Copy.PARAM_PARTITION)
    assert partition is not None and (partition.dtype, partition.location, partition.offload_device) == (
        "bf16", Location.HOST_PINNED, "cpu")
    assert not plan.params_cast_from_master


def test_an_offloaded_optimizer_keeps_a_device_partition_and_host_gradients() -> None:
    plan = _plan(offload_optimizer="nvme", optimizer_pin_memory=True)
    partition, master, grads = (plan.get(copy) for copy in (Copy.PARAM_PARTITION, Copy.MASTER, Copy.GRAD_PARTITION))
    assert partition is not None and partition.location is Location.DEVICE
    assert master is not None and master.location is Location.NVME
    assert grads is not None and grads.location is Location.HOST_PINNED
    assert plan.has(Copy.SWAP_BUFFERS)


def test_both_blocks_on_nvme_keep_two_pools_and_the_swap_budget() -> None:
    plan = _plan(offload_optimizer="nvme", offload_param="nvme", optimizer_buffer_count=6, param_buffer_count=3,
                 param_max_in_cpu=1000, param_pin_memory=True)
    optimizer_pool, param_pool = plan.get(Copy.SWAP_BUFFERS), plan.get(Copy.PARAM_SWAP_BUFFERS)
    assert optimizer_pool is not None and (optimizer_pool.dtype, optimizer_pool.tensors) == ("fp32", 6)
    assert optimizer_pool.location is Location.HOST
    assert param_pool is not None and (param_pool.dtype, param_pool.tensors) == ("bf16", 3)
    assert param_pool.location is Location.HOST_PINNED
    assert plan.swap_budget(Copy.PARAM_PARTITION) == (3, 1000)  # read-ahead buffers, elements kept in host memory
    assert plan.swap_budget(Copy.MASTER) == (6, None)  # every element in swap files, streamed through 6 buffers
    on_cpu = _plan(offload_param="cpu")
    partition = on_cpu.get(Copy.PARAM_PARTITION)
    assert partition is not None and partition.in_memory_elements is None
    assert not on_cpu.has(Copy.PARAM_SWAP_BUFFERS)
    with pytest.raises(AssertionError, match="keeps no param partition in swap files"):
        on_cpu.swap_budget(Copy.PARAM_PARTITION)


def test_plan_for_config_takes_the_blocks_swap_budget() -> None:
    config = load_config({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        "stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp", "buffer_count": 7, "max_in_cpu": 123}}})
    plan = plan_for_config(config, world_size=2, accelerator="cuda")
    assert plan.swap_budget(Copy.PARAM_PARTITION) == (7, 123)


@pytest.mark.parametrize(("stage", "expected"), [(0, 2 * 4 + 2 * 4 + 4 * 4 + 4 * 4 + 8 * 4), (1, 8 + 8 + 4 + 4 + 8),
                                                 (2, 8 + 4 + 2 + 4 + 8)])
def test_stages_0_to_2_keep_their_copies(stage: int, expected: int) -> None:
    """Per element of a rank's partition on 4 ranks: whole copies count 4 times."""
    plan = _plan(stage=stage)
    assert plan.step_granularity is StepGranularity.ALL_AT_ONCE
    assert plan.bytes_per_parameter_at_step() == expected


def test_fp32_compute_steps_the_parameters_themselves() -> None:
    plan = _plan(compute_dtype="fp32")
    assert plan.master_is_params and not plan.has(Copy.MASTER)
    partition = plan.get(Copy.PARAM_PARTITION)
    assert partition is not None and partition.dtype == "fp32"


def test_bad_inputs_name_the_field() -> None:
    with pytest.raises(ValueError, match="stage must be 0, 1, 2 or 3"):
        PlanInputs(stage=4, compute_dtype="bf16")
    with pytest.raises(ValueError, match="compute_dtype must be one of"):
        PlanInputs(stage=3, compute_dtype="int8")


def test_the_plan_of_a_ds_config() -> None:
    config = load_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                          "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "pin_memory": True}}})
    plan = plan_for_config(config, world_size=8, accelerator="cuda")
    assert plan.offloaded(Copy.PARAM_PARTITION) == "cpu" and plan.inputs.world_size == 8
    assert [row["copy"] for row in plan.rows()][:2] == [str(Copy.PARAMS_GATHERED), str(Copy.PARAM_PARTITION)]


@pytest.mark.parametrize(("extra", "problem"), [
    ({"zero_optimization": {"stage": 2}}, "needs stage 3"),
    ({"gradient_clipping": 1.0}, "cannot clip by the global norm"),
    ({"fp16": {"enabled": True}, "bf16": {"enabled": False}}, "cannot skip an fp16 overflow step"),
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}, "remove offload_optimizer"),
    ({"gradient_accumulation_steps": 2}, "gradient_accumulation_steps is 2; set it to 1"),
])
def test_step_in_backward_is_refused_where_it_cannot_be_exact(extra: dict[str, object], problem: str) -> None:
    config = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "gradient_clipping": 0,
              "zero_optimization": {"stage": 3}}
    config.update(extra)
    zero = dict(config["zero_optimization"])  # type: ignore[call-overload]
    config["zero_optimization"] = {**zero, "step_in_backward": True}
    with pytest.raises(ConfigError, match=problem) as caught:
        load_config(config, world_size=2)
    assert str(caught.value).startswith("zero_optimization.step_in_backward:")
