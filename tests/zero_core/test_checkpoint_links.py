"""Nothing a save, an export or a conversion writes goes through a symbolic link, and an export is whole.

Each test plants links to files outside the target (a shared cache, as a Hugging Face snapshot's files are)
where zero writes, and checks every outside file is exactly as it was. An export interrupted by Ctrl-C,
or killed between its renames, leaves OUT exactly the earlier export; the next export finishes the job.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_main
from engine_helpers import small_trained_engine
from multirank import run_ranks


def _attempt_save(engine: Any, root: str, tag: str) -> str:
    from zero_plugins import ZeroError

    try:
        engine.save_checkpoint(root, tag=tag)
        return "ok"
    except ZeroError as error:
        return str(error)


def _saves(rank: int, world_size: int, tmp: str) -> dict[str, str]:
    """The checkpoint the export tests read, then saves onto tag paths that are links, and save_16bit_model
    onto a link (the fixture made the links)."""
    engine = small_trained_engine()
    engine.save_checkpoint(f"{tmp}/checkpoints", tag="t")
    results = {tag: _attempt_save(engine, f"{tmp}/save", tag) for tag in ("dangling", "linked")}
    engine.save_16bit_model(f"{tmp}/16bit")
    engine.destroy()
    return results


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    tmp = tmp_path_factory.mktemp("links")
    cache = _cache(tmp)
    (tmp / "save").mkdir()
    (tmp / "save" / "dangling").symlink_to(tmp / "nowhere")
    (tmp / "save" / "linked").symlink_to(cache, target_is_directory=True)
    (tmp / "16bit").mkdir()
    (tmp / "16bit" / "pytorch_model.bin").symlink_to(cache / "blob-weights")
    return tmp, run_ranks(_saves, 1, str(tmp), timeout=180)[0]


def _cache(tmp: Path) -> Path:
    """A shared cache of blobs the links point into; made once per folder."""
    cache = tmp / "cache"
    if not cache.exists():
        cache.mkdir()
        for name in ("blob-config", "blob-index", "blob-weights", "blob-tokenizer"):
            (cache / name).write_bytes(name.encode())
    return cache


def _cache_is_untouched(cache: Path) -> None:
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == {
        name: name.encode() for name in ("blob-config", "blob-index", "blob-weights", "blob-tokenizer")}


def test_a_tag_path_that_is_a_link_is_refused_before_anything_is_written(saved: tuple[Path, dict[str, str]]) -> None:
    tmp, results = saved
    for tag, target in (("dangling", tmp / "nowhere"), ("linked", tmp / "cache")):
        assert results[tag] == (f"checkpoint tag path {tmp / 'save' / tag} is a symbolic link (to {target}); move "
                                "the link away, or pass another tag"), results[tag]
    assert sorted(os.listdir(tmp / "save")) == ["dangling", "linked"], "no staging was left behind"
    _cache_is_untouched(tmp / "cache")


def test_save_16bit_model_replaces_a_link_instead_of_writing_through_it(saved: tuple[Path, dict[str, str]]) -> None:
    import torch

    tmp, _ = saved
    written = tmp / "16bit" / "pytorch_model.bin"
    assert not written.is_symlink() and sorted(torch.load(written, weights_only=True)) == [
        "0.bias", "0.weight", "1.bias", "1.weight"]
    _cache_is_untouched(tmp / "cache")


@pytest.mark.parametrize("safe", [False, True], ids=["torch.save", "safetensors"])
def test_zero_to_fp32_replaces_links_in_its_output(saved: tuple[Path, dict[str, str]], tmp_path: Path,
                                                   safe: bool) -> None:
    from zero_core.utils.zero_to_fp32 import convert_zero_checkpoint_to_fp32_state_dict

    tmp, _ = saved
    stem, extension = ("model", "safetensors") if safe else ("pytorch_model", "bin")
    names = [f"{stem}-00001-of-00002.{extension}", f"{stem}-00002-of-00002.{extension}",
             f"{stem}.{extension}.index.json"]
    for name in names:
        (tmp_path / name).symlink_to(tmp / "cache" / "blob-weights")
    convert_zero_checkpoint_to_fp32_state_dict(tmp / "checkpoints", tmp_path, max_shard_size=200,
                                               safe_serialization=safe)
    assert sorted(os.listdir(tmp_path)) == sorted(names)
    assert not any((tmp_path / name).is_symlink() for name in names)
    _cache_is_untouched(tmp / "cache")


def _export(checkpoints: Path, out: Path, capsys: Any, *flags: str) -> tuple[int, str, str]:
    return run_main(capsys, "checkpoint", "export", str(checkpoints), str(out), *flags)


def test_export_overwrite_into_a_snapshot_of_links_leaves_the_shared_cache_as_it_was(
        saved: tuple[Path, dict[str, str]], tmp_path: Path, capsys: Any) -> None:
    tmp, _ = saved
    cache = _cache(tmp)
    plain = tmp_path / "plain"
    assert _export(tmp / "checkpoints", plain, capsys, "--max-shard-size", "200B")[0] == 0
    files = json.loads((plain / "zero_export.json").read_text())["files"]
    snapshot = tmp_path / "snapshot"  # as huggingface_hub lays one out: every file a link into the cache
    snapshot.mkdir()
    blobs = {"config.json": "blob-config", "model.safetensors.index.json": "blob-index", "tokenizer.json":
             "blob-tokenizer", **{name: "blob-weights" for name in files if name.endswith(".safetensors")}}
    for name, blob in blobs.items():
        (snapshot / name).symlink_to(cache / blob)
    code, stdout, err = _export(tmp / "checkpoints", snapshot, capsys, "--max-shard-size", "200B", "--overwrite")
    assert code == 0, err
    _cache_is_untouched(cache)
    assert sorted(os.listdir(snapshot)) == sorted([*blobs, "zero_export.json"])
    for name in files:
        assert not (snapshot / name).is_symlink() and (snapshot / name).read_bytes() == (plain / name).read_bytes()
    assert os.readlink(snapshot / "tokenizer.json") == str(cache / "blob-tokenizer"), "the user's link is kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain", "snapshot"], "no staging or aside is left"


def _tree(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


@pytest.fixture
def earlier(saved: tuple[Path, dict[str, str]], tmp_path: Path, capsys: Any) -> tuple[Path, dict[str, bytes]]:
    """OUT holding an export as one file, and a tokenizer the user added: what an interrupted export must leave."""
    out = tmp_path / "out"
    assert _export(saved[0] / "checkpoints", out, capsys)[0] == 0
    (out / "tokenizer.json").write_text("{}")
    return out, _tree(out)


def test_an_export_interrupted_after_its_first_file_leaves_the_earlier_export(
        saved: tuple[Path, dict[str, str]], earlier: tuple[Path, dict[str, bytes]], capsys: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import safetensors.torch

    out, before = earlier
    save_file = safetensors.torch.save_file
    calls = []

    def save_then_interrupt(*args: Any, **kwargs: Any) -> None:
        save_file(*args, **kwargs)
        calls.append(args[1])
        if len(calls) == 1:
            raise KeyboardInterrupt  # Ctrl-C after the first shard is on disk

    monkeypatch.setattr(safetensors.torch, "save_file", save_then_interrupt)
    code, _, _ = _export(saved[0] / "checkpoints", out, capsys, "--max-shard-size", "200B", "--dtype", "bf16")
    assert code == 130 and len(calls) == 1  # the command's status for Ctrl-C
    assert _tree(out) == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"], "the staging directory is removed"


@pytest.mark.parametrize("killed_after", [1, 2], ids=["between the renames", "after the swap"])
def test_an_export_killed_while_publishing_is_undone_or_finished_by_the_next(
        saved: tuple[Path, dict[str, str]], earlier: tuple[Path, dict[str, bytes]], capsys: Any,
        killed_after: int) -> None:
    out, before = earlier
    # A fresh interpreter that dies (no handler runs) right after its `killed_after`-th rename.
    script = ("import os, sys\nfrom zero_core.checkpoint import export_checkpoint\nrename, count = os.rename, [0]\n"
              "def dying(*a):\n    rename(*a); count[0] += 1\n    if count[0] == int(sys.argv[3]): os._exit(9)\n"
              "os.rename = dying\nexport_checkpoint(sys.argv[1], sys.argv[2], max_shard_size=200)\n")
    killed = subprocess.run([sys.executable, "-c", script, str(saved[0] / "checkpoints"), str(out),
                             str(killed_after)], capture_output=True, text=True, timeout=120)
    assert killed.returncode == 9, killed.stderr
    left = sorted(p.name for p in out.parent.iterdir())
    aside = next(name for name in left if name.endswith(".old"))
    # Between the renames OUT is missing (it is the aside); after the swap it is the new export, the aside beside it.
    assert left == sorted([aside, aside.removesuffix(".old") if killed_after == 1 else "out"]), left
    code, _, err = _export(saved[0] / "checkpoints", out, capsys, "--max-shard-size", "200B")
    assert code == 0, err
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"], "the killed export's directories are gone"
    assert _tree(out)["tokenizer.json"] == before["tokenizer.json"] and "model.safetensors" not in _tree(out)
    assert "model.safetensors.index.json" in _tree(out)


def test_export_into_a_read_only_location_is_one_line_naming_it(saved: tuple[Path, dict[str, str]],
                                                                capsys: Any) -> None:
    code, stdout, err = _export(saved[0] / "checkpoints", Path("/sys/zero-export"), capsys)
    assert (code, stdout) == (2, "") and err.startswith("zero: error: export OUT /sys/zero-export: cannot create a "
                                                        "file in /sys (") and len(err.splitlines()) == 1, err


def test_export_out_that_is_a_link_is_refused_naming_its_target(saved: tuple[Path, dict[str, str]], tmp_path: Path,
                                                                capsys: Any) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "real", target_is_directory=True)
    code, _, err = _export(saved[0] / "checkpoints", tmp_path / "out", capsys)
    assert code == 2 and err == (f"zero: error: export OUT {tmp_path / 'out'} is a symbolic link (to "
                                 f"{tmp_path / 'real'}); pass the directory it points to ({tmp_path / 'real'}), "
                                 "or another\n"), err
    assert os.listdir(tmp_path / "real") == []
