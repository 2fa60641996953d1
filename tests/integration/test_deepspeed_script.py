"""One DeepSpeed training script (scripts/deepspeed_train.py), run unchanged with `import zero_core as deepspeed`.

The script uses DeepSpeed's surface as scripts do (its docstring lists the calls) on a tiny GPT-2 at stage 3,
fp32, gradient accumulation 2, three micro-batches per epoch (each epoch ends on a step that
set_gradient_accumulation_boundary forces). With zero_core on 2 ranks it always runs; with DeepSpeed 0.19.8
(where it is installed, on its CPU accelerator over gloo) the same script gives the same per-step losses
(relative 1e-5) and the same weights through save_16bit_model and zero_to_fp32.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from deepspeed_peer import import_deepspeed
from multirank import run_ranks

WORLD_SIZE = 2
SCRIPT = Path(__file__).parent / "scripts" / "deepspeed_train.py"
CONFIG = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 2,
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01, "torch_adam": True}},
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                          "stage3_gather_16bit_weights_on_model_save": True},
}


def _run_script(rank: int, world_size: int, module_name: str, root: str) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("deepspeed_train", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    deepspeed = import_deepspeed() if module_name == "deepspeed" else importlib.import_module(module_name)
    return script.main(deepspeed, ["--deepspeed", "--deepspeed_config", f"{root}/ds_config.json",
                                   "--save_dir", f"{root}/{module_name}"])


def _run(module_name: str, root: Path) -> list[dict[str, Any]]:
    (root / "ds_config.json").write_text(json.dumps(CONFIG))
    return run_ranks(_run_script, WORLD_SIZE, module_name, str(root), timeout=120, env={"DS_ACCELERATOR": "cpu"})


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _run("zero_core", tmp_path_factory.mktemp("zero_core_script"))


def test_the_script_runs_with_zero_core_as_deepspeed(ours: list[dict[str, Any]]) -> None:
    for rank, result in enumerate(ours):
        assert len(result["losses"]) == 9 and all(loss > 0 for loss in result["losses"])
        assert result["global_steps"] == 6, "two steps an epoch: one counted, one forced at the epoch's end"
        assert result["saved_16bit"] is True
        assert result["client_state"] == {"epoch": 2, "samples": 12}
        assert result["comm"][:3] == (rank, WORLD_SIZE, rank)
    assert ours[0]["comm"][3] == pytest.approx(
        sum(sum(r["losses"]) / len(r["losses"]) for r in ours) / WORLD_SIZE), "all_reduce summed the ranks' means"
    zero = ours[0]
    assert zero["fp32"]["transformer.wte.weight"] is zero["fp32"]["lm_head.weight"], "tied, as DeepSpeed's"
    for name, value in zero["16bit"].items():
        assert torch.equal(value, zero["fp32"][name]), f"{name}: fp32 compute, so the 16-bit save is the master"
        assert torch.equal(zero["loaded"][name], value), name


def test_the_script_gives_deepspeeds_losses_and_weights(ours: list[dict[str, Any]], tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    theirs = _run("deepspeed", tmp_path)
    for rank in range(WORLD_SIZE):
        torch.testing.assert_close(torch.tensor(ours[rank]["losses"]), torch.tensor(theirs[rank]["losses"]),
                                   rtol=1e-5, atol=0, msg=f"rank {rank} losses")
        for key in ("global_steps", "saved_16bit", "client_state"):
            assert ours[rank][key] == theirs[rank][key], key
    for source in ("16bit", "fp32", "loaded"):
        assert ours[0][source].keys() == theirs[0][source].keys(), source
        for name, value in ours[0][source].items():
            torch.testing.assert_close(value, theirs[0][source][name], rtol=1e-4, atol=1e-6, msg=f"{source} {name}")
