"""A stage-3 checkpoint of a Hugging Face model, exported and loaded back by `from_pretrained`.

Two ranks train a small GPT-NeoX at stage 3 in bf16 (tied embeddings, one frozen parameter,
small parameters whole and the rest partitioned), save a checkpoint and the 16-bit model, and
hand back the engine's gathered weights and each rank's pieces of the fp32 master. Then:
- `zero checkpoint export --dtype bf16` loads with `AutoModelForCausalLM.from_pretrained` into
  exactly the engine's weights (the same logits as the engine's module_state_dict in a fresh
  model), the tied output embedding re-tied from the one saved name; the fp32 export holds
  the master;
- the export holds about one shard plus one tensor in memory (StorageTracker's peak);
- `get_fp32_state_dict_from_zero_checkpoint` is the master, bit for bit, and the frozen
  parameter's weights in fp32;
- `zero checkpoint inspect --json` describes the save; save_16bit_model wrote the gathered weights.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from cli_helpers import run_main
from hf_models import SMALL_GPT_NEOX, gpt_neox, train_causal_lm
from multirank import run_ranks

MODEL = {**SMALL_GPT_NEOX, "tie_word_embeddings": True}
FROZEN = "gpt_neox.final_layer_norm.bias"
TIED = ("lm_head.weight", "gpt_neox.embed_in.weight")  # (the tied name, the saved one)
STEPS, SEQ = 3, 16
SHARD = 16_000  # bytes: about a fifth of the model in fp32
CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 64,
                                "stage3_gather_16bit_weights_on_model_save": True}}


def _master_pieces(engine: Any) -> dict[str, tuple[int, list[tuple[int, torch.Tensor]]]]:
    """This rank's pieces of each parameter's fp32 master: {name: (numel, [(first element, values)])}."""
    from zero_core.sharding import param_name

    pieces: dict[str, tuple[int, list[tuple[int, torch.Tensor]]]] = {}
    for group in engine.optimizer.groups:
        for index, layout in enumerate(group.layouts):
            lo, hi = group.master.ranges[index]
            for piece in layout.pieces_in(lo, hi):
                values = group.master.tensors[index][piece.shard_offset : piece.shard_offset + piece.stop - piece.start]
                entry = pieces.setdefault(param_name(piece.slot.param), (piece.slot.numel, []))
                entry[1].append((piece.start, values.clone()))
    return pieces


def _train_and_save(rank: int, world_size: int, root: str) -> dict[str, Any]:
    import zero_core

    model = gpt_neox(0, **MODEL)
    model.get_parameter(FROZEN).requires_grad_(False)
    engine, _, _, _ = zero_core.initialize(model=model, config=CONFIG)
    data = torch.randint(0, MODEL["vocab_size"], (STEPS, 1, world_size, 2, SEQ),
                         generator=torch.Generator().manual_seed(1))
    train_causal_lm(engine, data, rank)
    engine.save_checkpoint(f"{root}/checkpoints")
    saved = [engine.save_16bit_model(f"{root}/16bit"),
             engine.save_16bit_model(f"{root}/16bit", "trainable.bin", exclude_frozen_parameters=True)]
    result = {"state": engine.module_state_dict(), "master": _master_pieces(engine), "saved": saved}
    engine.destroy()
    return result


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("export")
    ranks = run_ranks(_train_and_save, 2, str(root), timeout=300)
    master: dict[str, torch.Tensor] = {}
    for rank in ranks:
        for name, (numel, pieces) in rank["master"].items():
            full = master.setdefault(name, torch.full((numel,), float("nan")))
            for start, values in pieces:
                full[start : start + values.numel()] = values
    return {"root": root, "checkpoints": root / "checkpoints", "state": ranks[0]["state"], "master": master,
            "saved": [rank["saved"] for rank in ranks]}


def _fresh_model(state: dict[str, torch.Tensor]) -> torch.nn.Module:
    model = gpt_neox(1, **MODEL)
    model.load_state_dict({name: value.float() for name, value in state.items()})
    return model.eval()


def _logits(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.randint(0, MODEL["vocab_size"], (2, SEQ), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        return model(input_ids=ids).logits


def _from_pretrained(path: Path) -> tuple[torch.nn.Module, dict[str, Any]]:
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    return model.eval(), info


def test_bf16_export_loads_with_from_pretrained_as_the_engines_model(run: dict[str, Any], tmp_path: Path,
                                                                      capsys: Any) -> None:
    out = tmp_path / "hf-bf16"
    code, stdout, _ = run_main(capsys, "checkpoint", "export", str(run["checkpoints"]), str(out), "--dtype", "bf16")
    assert code == 0, stdout
    assert sorted(path.name for path in out.iterdir()) == ["config.json", "model.safetensors", "zero_export.json"]
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    model, info = _from_pretrained(out)
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    tied, saved = TIED
    assert model.get_parameter(tied) is model.get_parameter(saved), "from_pretrained re-ties the embedding"
    torch.testing.assert_close(_logits(model), _logits(_fresh_model(run["state"])), rtol=1e-5, atol=1e-5)


def test_fp32_export_holds_the_master_in_shards(run: dict[str, Any], tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "hf-fp32"
    code, stdout, _ = run_main(capsys, "checkpoint", "export", str(run["checkpoints"]), str(out),
                               "--max-shard-size", str(SHARD))
    assert code == 0, stdout
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert TIED[0] not in index["weight_map"]
    shards: dict[str, list[str]] = {}
    for name, file in index["weight_map"].items():
        shards.setdefault(file, []).append(name)
    assert len(shards) >= 4
    for names in shards.values():
        assert len(names) == 1 or sum(4 * run["state"][name].numel() for name in names) <= SHARD, names
    model, _ = _from_pretrained(out)
    weights = dict(model.named_parameters())
    for name, master in run["master"].items():
        assert torch.equal(weights[name].detach().reshape(-1), master), name
    assert torch.equal(weights[FROZEN].detach(), run["state"][FROZEN].float())


def test_export_holds_about_one_shard_and_one_tensor(run: dict[str, Any], tmp_path: Path) -> None:
    from zero_core import StorageTracker
    from zero_core.checkpoint import export_checkpoint

    params = json.loads((run["checkpoints"] / "global_step3" / "zero_checkpoint.json").read_text())["params"]
    sizes = [4 * math.prod(shape) for shape in params.values()]
    with StorageTracker() as tracker:
        baseline = tracker.current_bytes("cpu")
        result = export_checkpoint(run["checkpoints"], tmp_path / "hf", max_shard_size=SHARD)
        peak = tracker.peak_bytes("cpu") - baseline
    assert result["bytes"] == sum(sizes)
    bound = SHARD + 2 * max(sizes)  # the shard, the tensor being read, and its fp32 copy (frozen weights)
    assert 0 < peak <= bound < sum(sizes), (peak, bound, sum(sizes))


def test_fp32_state_dict_is_the_engines_master(run: dict[str, Any]) -> None:
    from zero_core import get_fp32_state_dict_from_zero_checkpoint

    state, master = run["state"], run["master"]
    fp32 = get_fp32_state_dict_from_zero_checkpoint(run["checkpoints"])
    assert set(fp32) == set(master) | {FROZEN, TIED[0]}
    assert fp32[TIED[0]] is fp32[TIED[1]], "a tied parameter under each of its names, one tensor"
    for name, values in master.items():
        assert not values.isnan().any(), f"{name}: the ranks' pieces cover it"
        assert fp32[name].shape == state[name].shape and torch.equal(fp32[name].reshape(-1), values), name
        assert torch.equal(fp32[name].to(torch.bfloat16), state[name]), f"{name}: the weights are the master, rounded"
    assert any(not torch.equal(fp32[name], state[name].float()) for name in master), "fp32, not the bf16 weights"
    assert torch.equal(fp32[FROZEN], state[FROZEN].float())
    without_frozen = get_fp32_state_dict_from_zero_checkpoint(run["checkpoints"], exclude_frozen_parameters=True)
    assert set(without_frozen) == set(master) | {TIED[0]}


def test_inspect_json_describes_the_save(run: dict[str, Any], capsys: Any) -> None:
    code, out, _ = run_main(capsys, "checkpoint", "inspect", str(run["checkpoints"]), "--json")
    assert code == 0
    (summary,) = json.loads(out)["tags"]
    elements = sum(value.numel() for name, value in run["state"].items() if name != TIED[0])
    trainable = sum(value.numel() for value in run["master"].values())
    assert (summary["tag"], summary["latest"], summary["complete"]) == ("global_step3", True, True)
    assert (summary["world_size"], summary["stage"], summary["compute_dtype"]) == (2, 3, "bfloat16")
    assert (summary["parameters"], summary["parameter_elements"]) == (len(run["master"]) + 1, elements)
    categories = summary["categories"]
    assert categories["model"] == {"tensors": len(run["master"]) + 1, "bytes": 2 * elements}
    for kind in ("master", "optim.exp_avg", "optim.exp_avg_sq"):
        assert categories[kind] == {"tensors": len(run["master"]), "bytes": 4 * trainable}, kind
    config = json.loads((run["checkpoints"] / "global_step3" / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == ("gpt_neox", ["GPTNeoXForCausalLM"])


def test_save_16bit_model_at_stage_3_writes_the_gathered_weights(run: dict[str, Any]) -> None:
    assert run["saved"] == [[True, True], [True, True]]
    everything = torch.load(run["root"] / "16bit" / "pytorch_model.bin")
    assert everything.keys() == run["state"].keys() and TIED[0] in everything, "state_dict's names, tied ones too"
    for name, value in run["state"].items():
        assert value.dtype == torch.bfloat16 and torch.equal(everything[name], value), name
    trainable = torch.load(run["root"] / "16bit" / "trainable.bin")
    assert set(everything) - set(trainable) == {FROZEN}
