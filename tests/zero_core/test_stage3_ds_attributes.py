"""DeepSpeed's attributes on stage-3 parameters (stage3/_ds_attributes.py), on 2 ranks, and what programs do with them.

- `ds_id`: an int, unique, the same on both ranks, kept from `zero_core.Init` into the engine and across steps.
- `ds_status`: INFLIGHT while a unit's all-gather is in flight, AVAILABLE while gathered (in forward, inside
  GatheredParameters), NOT_AVAILABLE once freed; a persistent parameter (whole on every rank) is always AVAILABLE.
- `ds_numel` / `ds_shape`: the whole parameter's while `.data` is empty.
- `ds_tensor`: this rank's elements; the ranks' pieces, in order, are the whole flattened parameter. A trainable
  unit cast from its fp32 master shows the master (fp32); a frozen one its bf16 partition.
- `GatheredParameters` skips `None` (a missing bias, as transformers passes).
- DeepSpeed-Chat's LoRA fuse at save (`convert_lora_to_linear_layer`: gather the parameters with `ds_id` that are
  NOT_AVAILABLE, `modifier_rank=0`, `enabled=hasattr(weight, "ds_id")`, then `weight.data += scaling * L^T R^T`)
  gives exactly the fused weight plain torch computes from the same values, on both ranks.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from multirank import run_ranks

WORLD_SIZE = 2
BF16 = torch.bfloat16


class LoRALinear(torch.nn.Module):
    """A frozen linear layer plus a trainable low-rank update, as DeepSpeed-Chat's LinearLayer_LoRA does it."""

    def __init__(self, linear: torch.nn.Linear, dim: int, scaling: float) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias
        rows, columns = getattr(self.weight, "ds_shape", self.weight.shape)  # the client reads ds_shape first
        self.lora_right_weight = torch.nn.Parameter(torch.randn(columns, dim) * 0.1)
        self.lora_left_weight = torch.nn.Parameter(torch.randn(dim, rows) * 0.1)  # nonzero: the fuse shows
        self.scaling = scaling / dim
        self.weight.requires_grad = False

    def fuse(self) -> None:
        self.weight.data += self.scaling * torch.matmul(self.lora_left_weight.t(), self.lora_right_weight.t())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias) + (x @ self.lora_right_weight @ self.lora_left_weight) * self.scaling


def _model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(LoRALinear(torch.nn.Linear(12, 10), 2, 4.0), torch.nn.ReLU(),
                               torch.nn.Linear(10, 3, bias=False))


def _config() -> dict[str, Any]:
    # The 10-element bias stays whole on every rank (persistent); everything larger is partitioned.
    return {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 10}}


def _to_fetch(params: list[torch.nn.Parameter | None]) -> list[torch.nn.Parameter]:
    """DeepSpeed-Chat's `_z3_params_to_fetch`."""
    from zero_core.stage3._param_status import ZeroParamStatus

    return [p for p in params if hasattr(p, "ds_id") and p.ds_status == ZeroParamStatus.NOT_AVAILABLE]


def _run(rank: int, world_size: int) -> dict[str, Any]:
    import zero_core
    from zero_core.stage3 import unit_of

    found: dict[str, Any] = {}
    with zero_core.Init(config=_config()):
        built = torch.nn.Linear(6, 4)
    unit = unit_of(built.weight)
    assert unit is not None
    found["init"] = [built.weight.ds_status.name]
    unit.start_gather()
    found["init"].append(built.weight.ds_status.name)
    unit.wait()
    found["init"].append(built.weight.ds_status.name)
    unit.free()
    found["init"].append(built.weight.ds_status.name)
    found["init_ids"] = (built.weight.ds_id, built.bias.ds_id)
    engine, _, _, _ = zero_core.initialize(model=built, config=_config())
    found["init_ids_in_engine"] = (built.weight.ds_id, built.bias.ds_id)
    engine.destroy()

    model = _model()
    shapes = {name: (p.numel(), tuple(p.shape)) for name, p in model.named_parameters()}
    engine, _, _, _ = zero_core.initialize(model=model, config=_config())
    named = dict(model.named_parameters())
    found["shapes"] = shapes
    found["ds_sizes"] = {name: (p.ds_numel, tuple(p.ds_shape), p.numel()) for name, p in named.items()}
    found["ids"] = {name: p.ds_id for name, p in named.items()}
    found["after_initialize"] = {name: p.ds_status.name for name, p in named.items()}
    seen: dict[str, str] = {}
    handle = model[0].register_forward_pre_hook(  # runs after the engine's own pre-hook gathered the unit
        lambda module, args: seen.update(weight=module.weight.ds_status.name,
                                              lora=module.lora_left_weight.ds_status.name))
    batch = torch.randn(2, 12, dtype=BF16, generator=torch.Generator().manual_seed(rank))
    engine.backward(engine(batch).float().pow(2).mean())
    engine.step()
    handle.remove()
    found["in_forward"] = seen
    found["after_step"] = {name: p.ds_status.name for name, p in named.items()}
    found["ids_after_step"] = {name: p.ds_id for name, p in named.items()}
    found["ds_tensor"] = {name: (p.ds_tensor.clone(), str(p.ds_tensor.dtype)) for name, p in named.items()}

    head = model[2]
    with zero_core.GatheredParameters([head.weight, head.bias, None]):  # head.bias is None: skipped
        found["inside_gathered"] = head.weight.ds_status.name
    with zero_core.GatheredParameters(list(named.values())):
        found["whole"] = {name: p.data.clone() for name, p in named.items()}
    found["after_gathered"] = head.weight.ds_status.name

    lora = model[0]
    with zero_core.GatheredParameters(_to_fetch([lora.weight, lora.bias, lora.lora_left_weight,
                                                  lora.lora_right_weight]),
                                      modifier_rank=0, enabled=hasattr(lora.weight, "ds_id")):
        lora.fuse()
    with zero_core.GatheredParameters(_to_fetch([lora.weight])):
        found["fused"] = lora.weight.data.clone()
    engine.destroy()
    return found


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return run_ranks(_run, WORLD_SIZE, timeout=120)


def test_ids_are_unique_the_same_on_every_rank_and_stable(ranks: list[dict[str, Any]]) -> None:
    ids = ranks[0]["ids"]
    assert sorted(ids) == ["0.bias", "0.lora_left_weight", "0.lora_right_weight", "0.weight", "2.weight"]
    assert all(isinstance(value, int) for value in ids.values())
    assert len(set(ids.values())) == len(ids), "unique"
    assert ranks[1]["ids"] == ids, "the same on every rank"
    assert ranks[0]["ids_after_step"] == ids, "stable across steps"
    assert ranks[0]["init_ids_in_engine"] == ranks[0]["init_ids"], "Init's ids kept by the engine's units"
    assert len(set(ranks[0]["init_ids"]) | set(ids.values())) == 7, "unique across models in the process"


def test_status_follows_gathers_and_frees(ranks: list[dict[str, Any]]) -> None:
    for found in ranks:
        assert found["init"] == ["NOT_AVAILABLE", "INFLIGHT", "AVAILABLE", "NOT_AVAILABLE"]
        partitioned = {"0.weight": "NOT_AVAILABLE", "0.lora_left_weight": "NOT_AVAILABLE",
                       "0.lora_right_weight": "NOT_AVAILABLE", "2.weight": "NOT_AVAILABLE",
                       "0.bias": "AVAILABLE"}  # persistent: whole on every rank
        assert found["after_initialize"] == partitioned
        assert found["in_forward"] == {"weight": "AVAILABLE", "lora": "AVAILABLE"}
        assert found["after_step"] == partitioned
        assert found["inside_gathered"] == "AVAILABLE"
        assert found["after_gathered"] == "NOT_AVAILABLE"


def test_numel_and_shape_are_the_whole_parameters(ranks: list[dict[str, Any]]) -> None:
    shapes = ranks[0]["shapes"]
    for name, (ds_numel, ds_shape, numel) in ranks[0]["ds_sizes"].items():
        assert (ds_numel, ds_shape) == shapes[name], name
        assert numel == (shapes[name][0] if name == "0.bias" else 0), "partitioned .data is empty"


def test_ds_tensor_is_this_ranks_elements(ranks: list[dict[str, Any]]) -> None:
    whole = ranks[0]["whole"]
    for name, value in whole.items():
        assert torch.equal(ranks[1]["whole"][name], value), name
    dtypes = {name: dtype for name, (_, dtype) in ranks[0]["ds_tensor"].items()}
    assert dtypes == {"0.weight": "torch.bfloat16", "2.weight": "torch.float32", "0.bias": "torch.bfloat16",
                      "0.lora_left_weight": "torch.float32", "0.lora_right_weight": "torch.float32"}
    for name, value in whole.items():
        pieces = [found["ds_tensor"][name][0] for found in ranks]
        if name == "0.bias":  # persistent: every rank holds all of it
            assert all(torch.equal(piece, value.flatten()) for piece in pieces)
            continue
        assert torch.equal(torch.cat(pieces).to(BF16), value.flatten()), name
    sizes = {name: [found["ds_tensor"][name][0].numel() for found in ranks] for name in whole}
    # units cut their flat buffer (right 24 then left 20, in registration order: 22 a rank), not each parameter
    assert sizes == {"0.weight": [60, 60], "0.lora_right_weight": [22, 2], "0.lora_left_weight": [0, 20],
                     "0.bias": [10, 10], "2.weight": [15, 15]}


def test_lora_fuse_under_gathered_parameters_equals_plain_torch(ranks: list[dict[str, Any]]) -> None:
    whole = ranks[0]["whole"]
    expected = whole["0.weight"] + (4.0 / 2) * torch.matmul(whole["0.lora_left_weight"].t(),
                                                           whole["0.lora_right_weight"].t())
    assert not torch.equal(expected, whole["0.weight"]), "the fuse changes the weight"
    for found in ranks:
        assert torch.equal(found["fused"], expected)
