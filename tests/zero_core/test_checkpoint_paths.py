"""No tag, `latest` content or OUT directory makes a save, a load or an export touch what zero did not write.

- Tags are names: any text either is refused with one error naming the rule, or names a directory
  directly inside save_dir (hypothesis); the issue's cases are refused before anything is written.
- Ranks that pass different tags fail on every rank before anything is written (tag_validation Fail,
  the default); with Warn every rank saves under rank 0's tag.
- A save removes only its own kind of staging directory: another program's `.notes.tmp/` survives.
- An export refuses a directory holding another model, replaces only what it writes with --overwrite,
  and re-exports over its own earlier export, keeping files the user added.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from zero_plugins import ZeroError

from cli_helpers import run_main
from engine_helpers import SMALL_CONFIG, save_small_checkpoint, small_trained_engine
from multirank import run_ranks

pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

REFUSED_TAGS = ["", ".", "..", "a/../../x", "/abs/path", "..\\x", " x", "x ", "a\nb", "a\x00b", "x" * 256, ".hidden"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", ".", "..", "/", "\\", " ", "\t", "\n", "\x00", "é", "~", "/.."]),
                max_size=8).map("".join)
       | st.text(max_size=300))
def test_any_accepted_tag_is_one_name_directly_inside_save_dir(tag: str) -> None:
    from zero_core.checkpoint._tags import check_tag, tag_problem

    save_dir = Path("/srv/save_dir")
    if tag_problem(tag) is not None:
        with pytest.raises(ZeroError, match="is not a valid checkpoint tag"):
            check_tag(tag, "tag")
        return
    target = Path(os.path.normpath(save_dir / tag))
    assert target.parent == save_dir and target.name == tag


@pytest.mark.parametrize("tag", REFUSED_TAGS, ids=repr)
def test_the_issues_tags_are_refused_naming_the_rule(tag: str) -> None:
    from zero_core.checkpoint._tags import check_tag

    with pytest.raises(ZeroError, match="is not a valid checkpoint tag: it ") as caught:
        check_tag(tag, "save_checkpoint: tag")
    assert len(str(caught.value).splitlines()) == 1


def _attempt(action: Any) -> str:
    try:
        action()
        return "ok"
    except ZeroError as error:
        return str(error)


def _one_rank_paths(root: str, outside: str) -> dict[str, str]:
    engine = small_trained_engine()
    save_dir = Path(root)
    results = {f"tag {tag!r}": _attempt(lambda t=tag: engine.save_checkpoint(root, tag=t)) for tag in
               [*REFUSED_TAGS, outside]}
    results["int tag"] = _attempt(lambda: engine.save_checkpoint(root, tag=5))
    (save_dir / "mine").mkdir()
    (save_dir / "mine" / "notes.txt").write_text("keep")
    results["not a checkpoint"] = _attempt(lambda: engine.save_checkpoint(root, tag="mine"))
    file_dir = save_dir / "a-file"
    file_dir.write_text("x")
    results["save_dir a file"] = _attempt(lambda: engine.save_checkpoint(file_dir, tag="t"))
    (save_dir / "latest").write_text("../outside")
    results["latest outside"] = _attempt(lambda: engine.load_checkpoint(root))
    results["tag outside"] = _attempt(lambda: engine.load_checkpoint(root, tag="../outside"))
    results["tag absolute"] = _attempt(lambda: engine.load_checkpoint(root, tag=outside))
    engine.destroy()
    return results


def _one_rank_jobs(rank: int, world_size: int, tmp: str) -> dict[str, str]:
    """The export tests' checkpoint (`tmp`/checkpoints), then `_one_rank_paths`: one 1-rank spawn, not two."""
    save_small_checkpoint(rank, world_size, str(Path(tmp) / "checkpoints"), "t", {})
    return _one_rank_paths(str(Path(tmp) / "save"), str(Path(tmp) / "outside"))


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The folder `_one_rank_jobs` wrote in (its save/ and outside/ made here first), and its results."""
    tmp = tmp_path_factory.mktemp("paths")
    root, outside = tmp / "save", tmp / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("mine")
    (root / ".notes.tmp").mkdir(parents=True)  # another program's
    (root / ".notes.tmp" / "draft").write_text("keep")
    (root / ".x.tmp").write_text("keep")
    return tmp, run_ranks(_one_rank_jobs, 1, str(tmp), timeout=180)[0]


def test_tags_and_latest_never_reach_outside_save_dir(one_rank: tuple[Path, dict[str, str]]) -> None:
    tmp, results = one_rank
    root, outside = tmp / "save", tmp / "outside"
    for tag in REFUSED_TAGS:
        assert "is not a valid checkpoint tag" in results[f"tag {tag!r}"], (tag, results[f"tag {tag!r}"])
    assert "holds a path separator" in results[f"tag {str(outside)!r}"]
    assert results["int tag"] == "ok" and (root / "5" / "zero_checkpoint.json").is_file()
    assert "exists and is not a zero checkpoint, so it is not replaced" in results["not a checkpoint"]
    assert (root / "mine" / "notes.txt").read_text() == "keep"
    assert "is a file, not a directory" in results["save_dir a file"]
    assert "`latest` file" in results["latest outside"] and "not a valid checkpoint tag" in results["latest outside"]
    assert "not a valid checkpoint tag" in results["tag outside"] and "not a valid" in results["tag absolute"]
    assert (outside / "precious.txt").read_text() == "mine" and sorted(os.listdir(outside)) == ["precious.txt"]
    assert (root / ".notes.tmp" / "draft").read_text() == "keep" and (root / ".x.tmp").read_text() == "keep"
    assert not list(root.glob(".zero-*")), "the save's own staging is gone"


def _different_tags(rank: int, root: str, mode: str) -> str:
    engine = small_trained_engine({**SMALL_CONFIG, "checkpoint": {"tag_validation": mode}})
    result = _attempt(lambda: engine.save_checkpoint(root, tag=f"step-of-rank{rank}"))
    if result == "ok":
        engine.load_checkpoint(root)
    engine.destroy()
    return result


def _both_validations(rank: int, world_size: int, tmp: str) -> dict[str, str]:
    """tag_validation Fail into `tmp`/fail, then Warn into `tmp`/warn, in one 2-rank spawn (not two)."""
    return {mode: _different_tags(rank, str(Path(tmp) / mode.lower()), mode) for mode in ("Fail", "warn")}


def test_ranks_with_different_tags_fail_together_before_writing(tmp_path: Path) -> None:
    per_rank = run_ranks(_both_validations, 2, str(tmp_path), timeout=180)
    failed, warned = [r["Fail"] for r in per_rank], [r["warn"] for r in per_rank]
    assert failed[0] == failed[1] and "the ranks passed different tags (rank 0 'step-of-rank0', rank 1 " \
        "'step-of-rank1'); nothing was written" in failed[0], failed
    assert not (tmp_path / "fail").exists() or not any((tmp_path / "fail").iterdir())
    assert warned == ["ok", "ok"] and (tmp_path / "warn" / "latest").read_text() == "step-of-rank0"
    assert sorted(p.name for p in (tmp_path / "warn").iterdir()) == ["latest", "step-of-rank0"]


@pytest.fixture(scope="module")
def saved(one_rank: tuple[Path, dict[str, str]]) -> Path:
    return one_rank[0] / "checkpoints"


def _another_model(out: Path, sharded: bool) -> dict[str, bytes]:
    out.mkdir(parents=True)
    files = {"config.json": b'{"model_type": "other"}'}
    if sharded:
        files.update({"model-00001-of-00002.safetensors": b"1", "model-00002-of-00002.safetensors": b"2",
                      "model.safetensors.index.json": b"{}"})
    else:
        files["model.safetensors"] = b"other weights"
    for name, content in files.items():
        (out / name).write_bytes(content)
    return files


def test_export_into_another_models_directory_is_refused_and_changes_nothing(saved: Path, tmp_path: Path,
                                                                              capsys: Any) -> None:
    out = tmp_path / "other"
    files = _another_model(out, sharded=True)
    code, stdout, err = run_main(capsys, "checkpoint", "export", str(saved), str(out))
    assert (code, stdout) == (2, "") and "is not empty and was not written by an export" in err and "--overwrite" in err
    code, stdout, err = run_main(capsys, "checkpoint", "export", str(saved), str(out), "--overwrite")
    assert (code, stdout) == (2, "") and "not replaced by this one, which from_pretrained would load" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files, "nothing was removed or replaced"


def test_export_overwrite_replaces_only_what_it_writes(saved: Path, tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "other"
    _another_model(out, sharded=False)
    (out / "tokenizer.json").write_text("{}")
    code, stdout, _ = run_main(capsys, "checkpoint", "export", str(saved), str(out), "--overwrite")
    assert code == 0 and "config.json already in OUT (not written by this export) was kept" in stdout, stdout
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json",
                                                    "zero_export.json"]
    assert (out / "model.safetensors").read_bytes() != b"other weights"
    assert json.loads((out / "zero_export.json").read_text())["files"] == ["model.safetensors"]
    code, _, _ = run_main(capsys, "checkpoint", "export", str(saved), str(out), "--max-shard-size", "100B")
    assert code == 0, "its own earlier export needs no --overwrite"
    names = sorted(p.name for p in out.iterdir())
    assert "model.safetensors" not in names and "model.safetensors.index.json" in names and "tokenizer.json" in names


def test_export_to_a_file_is_one_line(saved: Path, tmp_path: Path, capsys: Any) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    code, stdout, err = run_main(capsys, "checkpoint", "export", str(saved), str(target))
    assert (code, stdout) == (2, "") and "is a file, not a directory" in err and len(err.strip().splitlines()) == 1
    assert target.read_text() == "x"
