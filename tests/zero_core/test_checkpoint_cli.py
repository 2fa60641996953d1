"""`zero checkpoint inspect` and `zero checkpoint export` on a small checkpoint: what they print, and their errors.

Two ranks train TiedLoRA (a tied head, a frozen base under a LoRA adapter) at stage 2 in bf16
and save after each of two steps, so the save_dir holds two tags and `latest`. Damaged copies
(a data file missing or cut short, no description) must read as incomplete, naming what is
wrong, and must not export. The GPT-NeoX export that `from_pretrained` loads is in
test_checkpoint_export.py.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from cli_helpers import run_main, run_zero
from multirank import run_ranks
from tied_lora import SEQ, VOCAB, TiedLoRA

CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}, "zero_optimization": {"stage": 2}}
FROZEN = {"up.base.weight", "up.base.bias"}


def _save_two_steps(rank: int, world_size: int, root: str) -> None:
    import zero_core

    torch.manual_seed(0)
    engine, _, _, _ = zero_core.initialize(model=TiedLoRA(), config=CONFIG)
    data = torch.randint(0, VOCAB, (2, world_size, 2, SEQ), generator=torch.Generator().manual_seed(1))
    for step in range(2):
        engine.backward(engine(data[step][rank]))
        engine.step()
        engine.save_checkpoint(root)
    engine.destroy()


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "checkpoints"
    run_ranks(_save_two_steps, 2, str(root), timeout=240)
    return root


def _damaged(saved: Path, tmp_path: Path, damage: str) -> Path:
    """A copy of the save_dir whose latest checkpoint has one thing wrong with it."""
    root = tmp_path / "damaged"
    shutil.copytree(saved, root)
    tag = root / "global_step2"
    if damage == "missing":
        (tag / "__1_0.distcp").unlink()
    elif damage == "truncated":
        data = (tag / "__0_0.distcp").read_bytes()
        (tag / "__0_0.distcp").write_bytes(data[: len(data) // 2])
    else:
        (tag / "zero_checkpoint.json").unlink()
    return root


def _inspect_json(capsys: Any, *args: str) -> tuple[int, dict[str, Any]]:
    code, out, _ = run_main(capsys, "checkpoint", "inspect", *args, "--json")
    return code, json.loads(out)


def test_inspect_json_lists_each_tag_with_its_layout_and_sizes(saved: Path, capsys: Any) -> None:
    code, data = _inspect_json(capsys, str(saved))
    assert code == 0
    assert data["latest"] == "global_step2" and data["latest_exists"]
    assert [s["tag"] for s in data["tags"]] == ["global_step1", "global_step2"]
    assert [s["latest"] for s in data["tags"]] == [False, True]
    model = TiedLoRA()
    params = dict(model.named_parameters())  # the tied head appears once, as embed.weight
    elements = sum(p.numel() for p in params.values())
    trainable = sum(p.numel() for name, p in params.items() if name not in FROZEN)
    for summary in data["tags"]:
        assert summary["complete"] and summary["problems"] == []
        assert (summary["world_size"], summary["stage"], summary["compute_dtype"]) == (2, 2, "bfloat16")
        assert (summary["parameters"], summary["parameter_elements"]) == (len(params), elements)
        assert summary["categories"] == {
            "model": {"tensors": len(params), "bytes": 2 * elements},
            "master": {"tensors": len(params) - len(FROZEN), "bytes": 4 * trainable},
            "optim.exp_avg": {"tensors": len(params) - len(FROZEN), "bytes": 4 * trainable},
            "optim.exp_avg_sq": {"tensors": len(params) - len(FROZEN), "bytes": 4 * trainable},
        }
        assert summary["objects"] == 3, "training, rng.rank0, rng.rank1"


def test_inspect_text_is_a_table_marking_latest(saved: Path, capsys: Any) -> None:
    code, out, err = run_main(capsys, "checkpoint", "inspect", str(saved))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"checkpoints in {saved} (* latest: global_step2)"
    assert lines[1].split() == ["tag", "complete", "files", "world", "size", "stage", "dtype", "parameters", "bytes"]
    assert lines[3].split()[:3] == ["global_step1", "yes", "verified"]
    assert lines[4].split()[:4] == ["global_step2", "*", "yes", "verified"]
    assert "optim.exp_avg_sq" in out


def test_inspect_one_tag_and_json_flag_before_the_action(saved: Path, capsys: Any) -> None:
    code, out, _ = run_main(capsys, "checkpoint", "--json", "inspect", str(saved), "--tag", "global_step1")
    assert code == 0
    assert [s["tag"] for s in json.loads(out)["tags"]] == ["global_step1"]


def test_inspect_errors_name_what_is_there(saved: Path, capsys: Any) -> None:
    code, out, err = run_main(capsys, "checkpoint", "inspect", str(saved), "--tag", "nope")
    assert (code, out) == (2, "")
    assert err == (f"zero: error: checkpoint tag 'nope' is not in {saved} (tags there: global_step1, "
                   "global_step2)\n")
    code, _, err = run_main(capsys, "checkpoint", "inspect", str(saved / "global_step1"))
    assert code == 2 and "is one checkpoint (a tag's directory): pass the directory above it" in err
    code, _, err = run_main(capsys, "checkpoint", "inspect", str(saved / "absent"))
    assert code == 2 and "is not a directory" in err


@pytest.mark.parametrize(("damage", "problem"), [
    ("missing", "__1_0.distcp is missing"),
    ("truncated", "__0_0.distcp is truncated"),
    ("description", "zero_checkpoint.json is missing"),
])
def test_damaged_checkpoints_are_incomplete_and_do_not_export(saved: Path, tmp_path: Path, capsys: Any,
                                                              damage: str, problem: str) -> None:
    root = _damaged(saved, tmp_path, damage)
    code, data = _inspect_json(capsys, str(root))
    assert code == 1, "an incomplete checkpoint fails the command"
    first, second = data["tags"]
    assert first["complete"]
    assert not second["complete"] and any(problem in line for line in second["problems"]), second["problems"]
    code, out, err = run_main(capsys, "checkpoint", "export", str(root), str(tmp_path / "out"))
    assert (code, out) == (2, "")
    assert problem.split(" is ")[0] in err and ("incomplete" in err or "damaged" in err), err


def test_export_writes_shards_index_and_progress(saved: Path, tmp_path: Path, capsys: Any) -> None:
    from safetensors.torch import load_file
    from zero_core import get_fp32_state_dict_from_zero_checkpoint

    out = tmp_path / "hf"
    code, stdout, stderr = run_main(capsys, "checkpoint", "export", str(saved), str(out), "--dtype", "bf16",
                                    "--max-shard-size", "4KB", "--json")
    assert code == 0
    result = json.loads(stdout)  # JSON alone on stdout; progress went to stderr
    expected = {name: value.to(torch.bfloat16) for name, value in get_fp32_state_dict_from_zero_checkpoint(saved).items()
                if name != "head.weight"}  # the tied head: exported once, under embed.weight, as from_pretrained re-ties it
    assert result["tensors"] == len(expected) and result["config"] is False
    assert stderr.splitlines()[-1].startswith(f"export: {len(expected)}/{len(expected)} tensors (")
    files = sorted(path.name for path in out.glob("*.safetensors"))
    assert files == result["files"] and len(files) > 1
    assert files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(expected)
    assert index["metadata"]["total_size"] == sum(v.numel() * 2 for v in expected.values())
    loaded: dict[str, torch.Tensor] = {}
    for file in files:
        shard = load_file(out / file)
        assert sum(v.numel() * 2 for v in shard.values()) <= 4000 or len(shard) == 1, "shards stay under the limit"
        loaded.update(shard)
    assert loaded.keys() == expected.keys()
    for name, value in expected.items():
        assert loaded[name].dtype == torch.bfloat16 and torch.equal(loaded[name], value), name


def test_export_to_one_file_replaces_an_earlier_export(saved: Path, tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "hf"
    assert run_main(capsys, "checkpoint", "export", str(saved), str(out), "--max-shard-size", "4KB")[0] == 0
    code, stdout, _ = run_main(capsys, "checkpoint", "export", str(saved), str(out), "--tag", "global_step1")
    assert code == 0
    assert sorted(path.name for path in out.iterdir()) == ["model.safetensors", "zero_export.json"], \
        "the old shards and index are gone; the export lists what it wrote"
    assert "config.json: the checkpoint has none" in stdout


def test_export_rejects_a_bad_shard_size(saved: Path, tmp_path: Path, capsys: Any) -> None:
    code, _, err = run_main(capsys, "checkpoint", "export", str(saved), str(tmp_path / "x"), "--max-shard-size", "2XB")
    assert code == 2 and "--max-shard-size '2XB': expected a size such as 2GB" in err


def test_fp32_state_dict_excludes_frozen_parameters_on_request(saved: Path) -> None:
    from zero_core import get_fp32_state_dict_from_zero_checkpoint

    everything = get_fp32_state_dict_from_zero_checkpoint(saved, tag="global_step1")
    trainable = get_fp32_state_dict_from_zero_checkpoint(saved, tag="global_step1", exclude_frozen_parameters=True)
    assert set(everything) - set(trainable) == FROZEN
    assert all(value.dtype == torch.float32 for value in everything.values())
    assert everything["up.base.weight"].shape == (64, 32)


def test_the_zero_command_runs_it(saved: Path) -> None:
    """Through the installed entry point, in a fresh interpreter."""
    result = run_zero("checkpoint", "inspect", str(saved), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["latest"] == "global_step2"
