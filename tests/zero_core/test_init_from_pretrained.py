"""transformers' `from_pretrained` inside `zero_core.Init` loads each module straight into its partitions.

- `from_pretrained` builds the model on the meta device and assigns each loaded tensor to its
  module; Init partitions a module once its last meta parameter is assigned. On 2 gloo ranks
  (different seeds), a saved GPT-NeoX, a GPT-2 with tied embeddings and a GPT-NeoX checkpoint
  missing its head (`embed_out.weight`, re-initialised by `initialize_weights`) gather to exactly the
  weights eager `from_pretrained` gives (rank 0's seed for the missing weight).
- Loading peaks at the shards plus about one module's whole weights, far below the whole
  model: a StorageTracker counts what torch allocates, and a parameter-registration hook adds
  every loaded tensor (safetensors creates them outside torch's dispatcher).
- An engine built from the loaded model (stage 3) gives the logits of one built from the eager
  model, bit for bit, and those of the eager model itself.
- Meta parameters left unassigned when the block ends, or handed to `Init(module=...)`, are
  errors naming the parameters by path.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from zero_plugins import ZeroError

from engine_helpers import module_numels

SEED = 1234
CONFIG = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
NEOX = {"vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
        "intermediate_size": 256, "max_position_embeddings": 64}
MODELS = ["gpt_neox", "gpt2_tied", "gpt_neox_missing"]


def _save(name: str, path: Path) -> None:
    from hf_models import gpt_neox
    from safetensors.torch import load_file, save_file
    from transformers import GPT2Config, GPT2LMHeadModel

    if name == "gpt2_tied":
        torch.manual_seed(SEED)
        model: Any = GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=4, n_head=4, vocab_size=256, n_positions=32,
                                                bos_token_id=0, eos_token_id=0))
    else:
        model = gpt_neox(SEED, **NEOX)
    model.save_pretrained(path)
    if name == "gpt_neox_missing":  # a head the checkpoint lacks: from_pretrained initialises it
        file = path / "model.safetensors"
        weights = load_file(file)
        del weights["embed_out.weight"]
        save_file(weights, file, metadata={"format": "pt"})


def _logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    import zero_core

    engine, _, _, _ = zero_core.initialize(model=model, config=CONFIG)
    logits = engine(input_ids=ids).logits.detach().clone()
    engine.destroy()
    return logits


def _load(rank: int, path: str) -> dict[str, Any]:
    import zero_core
    from transformers import AutoModelForCausalLM
    from zero_core import StorageTracker

    torch.manual_seed(SEED + rank)  # Init keeps rank 0's draws for the weights it initialises
    with StorageTracker() as tracker:
        def count(module: nn.Module, name: str, param: Any) -> None:  # the loaded tensor, before Init partitions it
            if isinstance(param, torch.Tensor) and param.device.type != "meta":
                tracker.track(param)

        hook = torch.nn.modules.module.register_module_parameter_registration_hook(count)
        try:
            with zero_core.Init(config=CONFIG):
                model = AutoModelForCausalLM.from_pretrained(path)
        finally:
            hook.remove()
    partitioned = all(p.numel() == 0 and p.ds_numel > 0 for p in model.parameters())
    units = {unit.name for p in model.parameters() if (unit := p._zero_unit) is not None}
    with zero_core.GatheredParameters(list(model.parameters())):
        state = {key: value.clone() for key, value in model.state_dict().items()}
    return {"model": model, "peak": tracker.peak_bytes("cpu"), "partitioned": partitioned, "units": units,
            "state": state}


def _run(rank: int, world_size: int, paths: dict[str, str]) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    results = {}
    for name, path in paths.items():
        loaded = _load(rank, path)
        torch.manual_seed(SEED)
        eager = AutoModelForCausalLM.from_pretrained(path)
        result = {key: value for key, value in loaded.items() if key != "model"}
        result["eager"] = {key: value.clone() for key, value in eager.state_dict().items()}
        result["numels"] = module_numels(eager)
        if name == "gpt_neox":
            ids = torch.randint(0, NEOX["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(rank))
            with torch.no_grad():
                result["plain_logits"] = eager(input_ids=ids).logits
            result["logits"] = (_logits(loaded["model"], ids), _logits(eager, ids))
        results[name] = result
    return results


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    from multirank import run_ranks

    paths = {}
    for name in MODELS:
        path = tmp_path_factory.mktemp(name)
        _save(name, path)
        paths[name] = str(path)
    return run_ranks(_run, 2, paths, timeout=120)


@pytest.mark.parametrize("name", MODELS)
def test_from_pretrained_under_init_loads_the_eager_weights(results: list[dict[str, Any]], name: str) -> None:
    for rank, result in enumerate(results):
        loaded = result[name]
        assert loaded["partitioned"], "every parameter is partitioned"
        assert loaded["state"].keys() == loaded["eager"].keys()
        for key, value in loaded["eager"].items():
            assert torch.equal(loaded["state"][key], value), f"rank {rank}: {key}"


def test_units_are_named_after_their_modules(results: list[dict[str, Any]]) -> None:
    units = results[0]["gpt_neox"]["units"]
    assert {"gpt_neox.embed_in", "gpt_neox.layers.3.mlp.dense_4h_to_h", "lm_head"} <= units, units


def test_loading_holds_about_one_module_whole(results: list[dict[str, Any]]) -> None:
    for result in results:
        for name in MODELS:
            numels = result[name]["numels"]
            whole, largest = sum(numels) * 4, max(numels) * 4
            shards = sum(-(-n // 2) for n in numels) * 4
            # transformers' loop keeps the previous tensor alive while it reads the next: one tensor more;
            # 4 KiB for the small bookkeeping tensors a load makes (a run measured 8 bytes of them)
            assert result[name]["peak"] <= shards + 2 * largest + 4096, name
            assert result[name]["peak"] < whole * 3 // 4, f"{name}: no rank ever holds the whole model"


def test_engine_logits_equal_eager(results: list[dict[str, Any]]) -> None:
    for result in results:
        loaded, eager = result["gpt_neox"]["logits"]
        assert torch.equal(loaded, eager)
        torch.testing.assert_close(loaded, result["gpt_neox"]["plain_logits"])


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)


def test_meta_parameters_left_unassigned_are_an_error(solo_process_group: None) -> None:
    import zero_core

    values = Block().state_dict()
    with pytest.raises(ZeroError, match=r"down\.weight, down\.bias are still on the meta device when the block ends"
                                        r".*assign=True"):
        with zero_core.Init(config=CONFIG):
            with torch.device("meta"):
                block = Block()
            block.up.load_state_dict({"weight": values["up.weight"], "bias": values["up.bias"]}, assign=True)
            with pytest.warns(UserWarning, match="meta parameter .* which is a no-op"):
                block.down.load_state_dict({"weight": values["down.weight"], "bias": values["down.bias"]})
    assert block.up.weight.numel() == 0 and block.up.weight.ds_numel == 128, "the assigned module is partitioned"


def test_init_of_a_meta_model_is_an_error(solo_process_group: None) -> None:
    import zero_core

    with torch.device("meta"):
        block = Block()
    with pytest.raises(ZeroError, match=r"Init\(module=...\): up\.weight, up\.bias, down\.weight, down\.bias on the "
                                        r"meta device hold no values"):
        zero_core.Init(module=block, config=CONFIG)


def test_init_turns_off_transformers_read_ahead(solo_process_group: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The read-ahead pool can hold every converted tensor at once (bf16 -> fp32: more than the whole fp32 model)."""
    import os

    import zero_core

    monkeypatch.delenv("HF_DEACTIVATE_ASYNC_LOAD", raising=False)
    with zero_core.Init(config=CONFIG):
        assert os.environ["HF_DEACTIVATE_ASYNC_LOAD"] == "1"
    assert "HF_DEACTIVATE_ASYNC_LOAD" not in os.environ
    monkeypatch.setenv("HF_DEACTIVATE_ASYNC_LOAD", "0")  # the user's choice stands
    with zero_core.Init(config=CONFIG):
        assert os.environ["HF_DEACTIVATE_ASYNC_LOAD"] == "0"
