"""DeepSpeed's module-level surface under `import zero_core as deepspeed` (docs/engine.md, "DeepSpeed's calls").

- `add_config_arguments(parser)` adds DeepSpeed's four flags with its defaults and returns the parser;
  `initialize(args=...)` reads `args.deepspeed_config` (or the deprecated `deepscale_config`, with a warning);
  two configs, a deprecated and a current one, or a `--local_rank` that disagrees with LOCAL_RANK are one error
  each, as DeepSpeed refuses them.
- `deepspeed.zero`, `deepspeed.comm`, `deepspeed.utils.zero_to_fp32`, `deepspeed.accelerator` are reachable as
  attributes; comm's calls are torch.distributed's on 2 ranks and one error before the group exists.
- `deepspeed.DeepSpeedEngine` is the engine's class and `deepspeed.runtime.lr_schedules` lists zero's schedules
  (accelerate's checks); `deepspeed.checkpoint.utils.clone_tensors_for_torch_save` copies nested tensors.
- `get_accelerator()` answers DeepSpeed's CPU accelerator's values.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from zero_plugins import ZeroError

from multirank import run_ranks

CONFIG = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
          "zero_optimization": {"stage": 0}}


def test_add_config_arguments_adds_deepspeeds_flags_and_returns_the_parser() -> None:
    import zero_core as deepspeed

    parser = argparse.ArgumentParser()
    assert deepspeed.add_config_arguments(parser) is parser
    assert vars(parser.parse_args([])) == {"deepspeed": False, "deepspeed_config": None, "deepscale": False,
                                           "deepscale_config": None}
    parsed = parser.parse_args(["--deepspeed", "--deepspeed_config", "ds.json"])
    assert (parsed.deepspeed, parsed.deepspeed_config) == (True, "ds.json")
    assert [group.title for group in parser._action_groups][-1] == "DeepSpeed"


def _arguments(**values: Any) -> argparse.Namespace:
    import zero_core

    args = zero_core.add_config_arguments(argparse.ArgumentParser()).parse_args([])
    for name, value in values.items():
        setattr(args, name, value)
    return args


@pytest.mark.parametrize(("args", "config", "message"), [
    ({"deepspeed_config": "a.json"}, CONFIG,
     "two ds_configs: args.deepspeed_config and config= (or config_params=); pass one of them"),
    ({"deepspeed_config": "a.json", "deepscale_config": "b.json"}, None,
     "two ds_configs: args.deepspeed_config and the deprecated args.deepscale_config; pass --deepspeed_config only"),
    ({}, None, "no ds_config: pass config= (a JSON path or a dict), or args with a deepspeed_config attribute "
               "(--deepspeed_config)"),
    ({"deepspeed_config": "a.json", "local_rank": 1}, None,
     "args.local_rank=1 but LOCAL_RANK=0; pass the launcher's --local_rank unchanged, or leave it out"),
])
def test_initialize_refuses_what_deepspeed_refuses(args: dict[str, Any], config: Any, message: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import zero_core

    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ZeroError) as error:
        zero_core.initialize(args=_arguments(**args), model=torch.nn.Linear(2, 1), config=config)
    assert str(error.value) == message


def test_initialize_reads_the_config_from_args(tmp_path: Path, solo_process_group: None,
                                               caplog: pytest.LogCaptureFixture) -> None:
    import zero_core

    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**CONFIG, "gradient_accumulation_steps": 3}))
    engine, _, _, _ = zero_core.initialize(args=_arguments(deepspeed_config=str(path), local_rank=-1),
                                           model=torch.nn.Linear(2, 1))
    assert engine.gradient_accumulation_steps() == 3
    engine.destroy()
    with caplog.at_level(logging.WARNING, logger="zero_core.engine"):
        engine, _, _, _ = zero_core.initialize(args=_arguments(deepscale_config=str(path)),
                                               model=torch.nn.Linear(2, 1))
    assert engine.gradient_accumulation_steps() == 3
    assert "--deepscale_config is deprecated; use --deepspeed_config" in caplog.messages
    engine.destroy()


def test_deepspeeds_subpackages_are_attributes() -> None:
    import zero_core as deepspeed
    from zero_core.stage3 import GatheredParameters, Init, register_external_parameter

    assert (deepspeed.zero.Init, deepspeed.zero.GatheredParameters, deepspeed.zero.register_external_parameter) == (
        Init, GatheredParameters, register_external_parameter)
    assert callable(deepspeed.utils.zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint)
    assert deepspeed.accelerator.get_accelerator() is deepspeed.get_accelerator()
    assert deepspeed.comm.init_distributed is deepspeed.init_distributed
    assert {"zero", "comm", "utils", "accelerator", "add_config_arguments"} <= set(dir(deepspeed))


def test_the_names_accelerate_checks_are_zeros_engine_and_schedules() -> None:
    import zero_core as deepspeed
    from zero_core.engine import ZeroEngine
    from zero_core.training import WarmupCosineLR, WarmupDecayLR, WarmupLR

    # accelerate: `isinstance(model, deepspeed.DeepSpeedEngine)`, and a scheduler whose class name is listed
    # in deepspeed.runtime.lr_schedules.VALID_LR_SCHEDULES goes to initialize as the engine's
    assert deepspeed.DeepSpeedEngine is ZeroEngine
    assert deepspeed.runtime.lr_schedules.VALID_LR_SCHEDULES == ["WarmupLR", "WarmupDecayLR", "WarmupCosineLR"]
    assert (deepspeed.runtime.lr_schedules.WarmupLR, deepspeed.runtime.lr_schedules.WarmupDecayLR,
            deepspeed.runtime.lr_schedules.WarmupCosineLR) == (WarmupLR, WarmupDecayLR, WarmupCosineLR)


def test_clone_tensors_for_torch_save_copies_every_nested_tensor_off_its_buffer() -> None:
    from collections import OrderedDict

    from zero_core.checkpoint.utils import clone_tensors_for_torch_save

    flat = torch.arange(6.0, requires_grad=True)
    view = flat[2:4]
    state = OrderedDict(weight=view, pair=(view, [view]), step=3)
    copied = clone_tensors_for_torch_save(state)
    assert type(copied) is OrderedDict and copied["step"] == 3
    tensors = [copied["weight"], copied["pair"][0], copied["pair"][1][0]]
    assert [tensor.tolist() for tensor in tensors] == [[2.0, 3.0]] * 3
    assert all(t.untyped_storage().nbytes() == 8 and not t.requires_grad for t in tensors)
    assert isinstance(copied["pair"], tuple) and isinstance(copied["pair"][1], list)


def _comm(rank: int, world_size: int) -> dict[str, Any]:
    import os

    import zero_core as deepspeed

    before = deepspeed.comm.is_initialized()
    try:
        deepspeed.comm.get_rank()
        refused = ""
    except ZeroError as error:
        refused = str(error)
    deepspeed.init_distributed(dist_backend="gloo")
    total = torch.tensor([float(rank + 1)])
    deepspeed.comm.all_reduce(total)
    maximum = torch.tensor([float(rank + 1)])
    deepspeed.comm.all_reduce(maximum, op=deepspeed.comm.ReduceOp.MAX)
    deepspeed.comm.barrier()
    return {"before": before, "refused": refused, "after": deepspeed.comm.is_initialized(),
            "rank": deepspeed.comm.get_rank(), "world": deepspeed.comm.get_world_size(),
            "local": (deepspeed.comm.get_local_rank(), int(os.environ["LOCAL_RANK"])),
            "sum": total.item(), "max": maximum.item()}


def test_comm_calls_are_torch_distributeds_on_the_default_group() -> None:
    results = run_ranks(_comm, 2, timeout=60)
    for rank, result in enumerate(results):
        assert (result["before"], result["after"]) == (False, True)
        assert result["refused"] == ("comm.get_rank() before the process group exists; call "
                                     "zero_core.init_distributed() or zero_core.initialize() first")
        assert (result["rank"], result["world"], result["local"]) == (rank, 2, (rank, rank))
        assert (result["sum"], result["max"]) == (3.0, 2.0)


def test_the_cpu_accelerator_answers_as_deepspeeds() -> None:
    from zero_core.accelerator import get_accelerator

    accelerator = get_accelerator()
    # DeepSpeed 0.19.8's CPU_Accelerator: 'cpu' for every device name, gloo (DS's "ccl" needs oneCCL), True.
    assert (accelerator.device_name(), accelerator.device_name(0), accelerator.current_device_name()) == (
        "cpu", "cpu", "cpu")
    assert accelerator.communication_backend_name() == "gloo"
    assert accelerator.is_available() is True
    assert accelerator.device_count() == 1
    accelerator.manual_seed(5)
    first = torch.rand(3)
    accelerator.manual_seed(5)
    assert torch.equal(first, torch.rand(3))
    accelerator.synchronize()
    accelerator.empty_cache()  # nothing cached on the host


def test_the_cuda_accelerator_names_devices_as_deepspeeds() -> None:
    from zero_core.accelerator.cuda import CudaAccelerator

    accelerator = CudaAccelerator()  # naming touches no CUDA
    assert (accelerator.device_name(), accelerator.device_name(1)) == ("cuda", "cuda:1")
    assert accelerator.communication_backend_name() == "nccl"
    assert CudaAccelerator.is_available() is torch.cuda.is_available()
