"""`zero_core.utils.zero_to_fp32`: DeepSpeed's three calls on a checkpoint a 2-rank stage-3 engine saved.

The model has a tied weight, a frozen layer, a float buffer and an integer buffer. As DeepSpeed's:
`get_fp32_state_dict_from_zero_checkpoint` gives the buffers and the fp32 parameters under state_dict's names,
a tied one shared (frozen ones left out on request); `convert_zero_checkpoint_to_fp32_state_dict` writes
`pytorch_model.bin` or safetensors shards with Hugging Face's index; `load_state_dict_from_zero_checkpoint` loads
them into a model and returns it. With fp32 compute the master is the weights, so every value is exact.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from multirank import run_ranks
from tied_lora import TiedFrozen

TIED = ("embed.weight", "head.weight")
FROZEN = {"frozen.weight", "frozen.bias"}
BUFFERS = {"scale", "seen"}


class _Model(TiedFrozen):
    """TiedFrozen with a float and an int64 buffer, which checkpoints carry but training never updates."""

    def __init__(self) -> None:
        super().__init__(8)
        self.register_buffer("scale", torch.full((8,), 0.5))
        self.register_buffer("seen", torch.tensor([3, 4], dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.frozen(self.embed(x)) * self.scale)


def _save(rank: int, world_size: int, root: str) -> dict[str, torch.Tensor]:
    import zero_core

    torch.manual_seed(0)
    config = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    engine, _, _, _ = zero_core.initialize(model=_Model(), config=config)
    for step in range(2):
        engine.backward(engine(torch.randn(2, 8, generator=torch.Generator().manual_seed(step + rank))).pow(2).mean())
        engine.step()
    engine.save_checkpoint(root)
    state = engine.module_state_dict()
    engine.destroy()
    return state


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    root = tmp_path_factory.mktemp("zero_to_fp32")
    return root, run_ranks(_save, 2, str(root / "checkpoints"), timeout=60)[0]


def test_fp32_state_dict_holds_buffers_and_parameters_with_tied_ones_shared(saved: Any) -> None:
    from zero_core.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    root, state = saved
    fp32 = get_fp32_state_dict_from_zero_checkpoint(root / "checkpoints")
    assert set(fp32) == set(state) == set(_Model().state_dict())
    assert list(fp32)[:2] == ["scale", "seen"], "buffers first, as DeepSpeed orders them"
    assert fp32[TIED[0]] is fp32[TIED[1]]
    for name, value in state.items():
        assert fp32[name].dtype == value.dtype and torch.equal(fp32[name], value), name
    trainable = get_fp32_state_dict_from_zero_checkpoint(root / "checkpoints", exclude_frozen_parameters=True)
    assert set(fp32) - set(trainable) == FROZEN
    lazy = get_fp32_state_dict_from_zero_checkpoint(root / "checkpoints", lazy_mode=True)
    assert all(torch.equal(lazy[name].contiguous(), fp32[name]) for name in fp32), "DeepSpeed's lazy tensors' call"


def test_convert_writes_one_pytorch_model_bin_by_default(saved: Any) -> None:
    from zero_core.utils.zero_to_fp32 import convert_zero_checkpoint_to_fp32_state_dict

    root, state = saved
    out = root / "bin"
    assert convert_zero_checkpoint_to_fp32_state_dict(root / "checkpoints", out) is None
    assert sorted(path.name for path in out.iterdir()) == ["pytorch_model.bin"]
    written = torch.load(out / "pytorch_model.bin", weights_only=True)
    assert written.keys() == state.keys()
    assert written[TIED[0]].data_ptr() == written[TIED[1]].data_ptr(), "stored once, under both names"
    for name, value in state.items():
        assert torch.equal(written[name], value), name


def test_convert_shards_safetensors_with_hugging_faces_index(saved: Any) -> None:
    from safetensors.torch import load_file
    from zero_core.utils.zero_to_fp32 import convert_zero_checkpoint_to_fp32_state_dict

    root, state = saved
    out = root / "shards"
    convert_zero_checkpoint_to_fp32_state_dict(root / "checkpoints", out, max_shard_size=300, safe_serialization=True,
                                               exclude_frozen_parameters=True)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 1 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    expected = {name for name in state if name not in FROZEN and name != TIED[1]}
    assert set(index["weight_map"]) == expected, "safetensors keeps a tied weight under its first name"
    loaded = {name: value for file in files for name, value in load_file(out / file).items()}
    assert loaded.keys() == expected
    assert index["metadata"]["total_size"] == sum(value.numel() * value.element_size() for value in loaded.values())
    for name in expected:
        assert torch.equal(loaded[name], state[name]), name


def test_load_state_dict_from_zero_checkpoint_returns_the_loaded_model(saved: Any) -> None:
    from zero_core.utils.zero_to_fp32 import load_state_dict_from_zero_checkpoint

    root, state = saved
    model = _Model()
    loaded = load_state_dict_from_zero_checkpoint(model, root / "checkpoints")
    assert loaded is model
    for name, value in model.state_dict().items():
        assert torch.equal(value, state[name]), name
