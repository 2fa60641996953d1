"""A checkpoint carries a manifest of its files, and readers check it and stay inside the tag directory.

- A save writes `zero_manifest.json`: every file of the tag, its size and blake2b hash.
- The reported case: one value flipped in a `.distcp` file (same size) fails `load_checkpoint` on both
  ranks with one CheckpointError naming the file; `zero checkpoint inspect` says the tag is damaged;
  `get_fp32_state_dict_from_zero_checkpoint` refuses it too.
- A tag saved before manifests (the committed legacy data) reads, and is said once to be unverified.
- A `.metadata` whose data path is absolute, climbs out with `..`, or whose data file is a link out
  of the tag is refused naming the path, before anything is read from it.
- `zero checkpoint inspect` of a directory holding other directories than tags inspects only the tags.
"""
from __future__ import annotations

import hashlib
import json
import logging
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_main
from engine_helpers import WarningRecords, save_small_checkpoint, small_trained_engine
from multirank import run_ranks

LEGACY = Path(__file__).parent / "data" / "legacy_checkpoints" / "stage2"
TAG = "good"


def _flip_a_value(tag: Path) -> str:
    """Change one bit of the fp32 master of `0.weight` where it lies in a data file; returns that file's name."""
    from zero_core.checkpoint import SavedCheckpoint

    values = SavedCheckpoint.open(tag.parent, TAG).read("master.0.weight").numpy().tobytes()
    for data in sorted(tag.glob("*.distcp")):
        content = bytearray(data.read_bytes())
        at = content.find(values)
        if at >= 0:
            content[at + 5] ^= 1  # a low mantissa bit of the second element: a plausible value, the same size
            data.write_bytes(bytes(content))
            return data.name
    raise AssertionError("master.0.weight's bytes are in no data file")


def _save_flip_and_load(rank: int, world_size: int, root: str) -> dict[str, Any]:
    """(2 ranks) save, then (rank 0) copy the tag with one value flipped; every rank loads the copy."""
    import torch.distributed as dist
    from zero_plugins import ZeroError

    save_small_checkpoint(rank, world_size, str(Path(root) / "saved"), TAG, {})
    flipped = Path(root) / "flipped"
    if rank == 0:
        shutil.copytree(Path(root) / "saved", flipped)
        (Path(root) / "file").write_text(_flip_a_value(flipped / TAG))
    dist.barrier()
    engine = small_trained_engine()
    try:
        engine.load_checkpoint(flipped)
        outcome = "loaded"
    except ZeroError as error:
        outcome = f"{type(error).__name__}: {error}"
    engine.destroy()
    return {"outcome": outcome}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    root = tmp_path_factory.mktemp("integrity")
    return root, run_ranks(_save_flip_and_load, 2, str(root), timeout=240)


def test_a_save_writes_a_manifest_of_every_file(saved: tuple[Path, list[dict[str, Any]]]) -> None:
    tag = saved[0] / "saved" / TAG
    manifest = json.loads((tag / "zero_manifest.json").read_text())
    assert (manifest["format"], manifest["hash"]) == (1, "blake2b")
    files = sorted(path.name for path in tag.iterdir() if path.name != "zero_manifest.json")
    assert files == [".metadata", "__0_0.distcp", "__1_0.distcp", "zero_checkpoint.json"]
    assert manifest["files"] == {name: {"bytes": (tag / name).stat().st_size,
                                        "blake2b": hashlib.blake2b((tag / name).read_bytes()).hexdigest()}
                                 for name in files}


def test_a_flipped_value_fails_the_load_naming_the_file(saved: tuple[Path, list[dict[str, Any]]],
                                                        capsys: Any) -> None:
    from zero_core import get_fp32_state_dict_from_zero_checkpoint
    from zero_core.checkpoint import CheckpointError

    root, results = saved
    tag, name = root / "flipped" / TAG, (root / "file").read_text()
    assert (tag / name).stat().st_size == (root / "saved" / TAG / name).stat().st_size
    problem = (f"{name} does not match its blake2b hash in zero_manifest.json (same size, other bytes: it changed "
               "after the save)")
    expected = f"CheckpointError: checkpoint {tag} is damaged: {problem}; load an earlier tag, or save again"
    assert [result["outcome"] for result in results] == [expected, expected]
    with pytest.raises(CheckpointError, match=f"damaged: {name} does not match"):
        get_fp32_state_dict_from_zero_checkpoint(root / "flipped")
    code, out, _ = run_main(capsys, "checkpoint", "inspect", str(root / "flipped"), "--json")
    summary = json.loads(out)["tags"][0]
    assert code == 1 and (summary["integrity"], summary["complete"]) == ("damaged", False)
    assert summary["problems"] == [f"damaged: {problem}"]
    code, out, _ = run_main(capsys, "checkpoint", "inspect", str(root / "flipped"))
    assert code == 1 and out.splitlines()[3].split()[:4] == [TAG, "*", "NO", "DAMAGED"], out
    assert f"  problem: damaged: {problem}" in out.splitlines()
    code, out, _ = run_main(capsys, "checkpoint", "inspect", str(root / "saved"), "--json")
    assert code == 0 and json.loads(out)["tags"][0]["integrity"] == "verified"


def test_a_checkpoint_without_a_manifest_loads_unverified_said_once(tmp_path: Path, capsys: Any) -> None:
    from zero_core.checkpoint import SavedCheckpoint

    shutil.copytree(LEGACY, tmp_path / "legacy")
    records = WarningRecords()
    logger = logging.getLogger("zero_core.checkpoint")
    logger.addHandler(records)
    try:
        first = SavedCheckpoint.open(tmp_path / "legacy")
        again = SavedCheckpoint.open(tmp_path / "legacy")
    finally:
        logger.removeHandler(records)
    assert first.read("model.down.bias").numel() == again.read("model.down.bias").numel() == 15
    assert records.messages == [f"checkpoint {tmp_path / 'legacy' / 'global_step2'} has no zero_manifest.json (saved "
                                "by an earlier zero): its files are loaded unverified; save it again to add one"]
    code, out, _ = run_main(capsys, "checkpoint", "inspect", str(tmp_path / "legacy"), "--json")
    summary = json.loads(out)["tags"][0]
    assert (code, summary["integrity"], summary["complete"]) == (0, "unverified", True)


def test_a_checkpoint_without_a_manifest_still_gets_the_metadata_checks(tmp_path: Path) -> None:
    from zero_core.checkpoint import CheckpointError, SavedCheckpoint

    shutil.copytree(LEGACY, tmp_path / "legacy")
    data = tmp_path / "legacy" / "global_step2" / "__1_0.distcp"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match=r"damaged: __1_0\.distcp is truncated: 1000 bytes, its data runs to byte "
                                              r"\d+ \(the file was cut short\); load an earlier tag, or save again$"):
        SavedCheckpoint.open(tmp_path / "legacy")


def _redirected(tmp_path: Path, how: str) -> tuple[Path, str]:
    """A legacy tag (no manifest) whose `.metadata` sends one data file outside the tag; returns it and the path."""
    tag = tmp_path / "legacy" / "global_step2"
    shutil.copytree(LEGACY, tmp_path / "legacy")
    (tmp_path / "outside").mkdir()
    shutil.copy(tag / "__1_0.distcp", tmp_path / "outside" / "__1_0.distcp")
    metadata = pickle.loads((tag / ".metadata").read_bytes())  # our own committed file: trusted here
    target = {"absolute": str(tmp_path / "outside" / "__1_0.distcp"), "dotdot": "../../outside/__1_0.distcp",
              "link": "__1_0.distcp"}[how]
    for info in metadata.storage_data.values():
        if info.relative_path == "__1_0.distcp":
            info.relative_path = target
    (tag / ".metadata").write_bytes(pickle.dumps(metadata))
    if how == "link":
        (tag / "__1_0.distcp").unlink()
        (tag / "__1_0.distcp").symlink_to(tmp_path / "outside" / "__1_0.distcp")
    return tag, target


@pytest.mark.parametrize("how", ["absolute", "dotdot", "link"])
def test_a_data_path_outside_the_tag_is_refused(tmp_path: Path, capsys: Any, how: str) -> None:
    from zero_core.checkpoint import CheckpointError, SavedCheckpoint

    tag, target = _redirected(tmp_path, how)
    with pytest.raises(CheckpointError) as caught:
        SavedCheckpoint.open(tmp_path / "legacy")
    message = str(caught.value)
    assert message.startswith(f"{tag / '.metadata'} places the data of ") and f" at {target!r}, which " in message
    assert message.endswith(f"{tmp_path / 'outside' / '__1_0.distcp'}, outside the checkpoint's directory {tag}: it "
                            "was not read; a checkpoint's files lie in its tag directory (load an earlier tag, or "
                            "save again)"), message
    code, out, _ = run_main(capsys, "checkpoint", "inspect", str(tmp_path / "legacy"), "--json")
    assert code == 1 and json.loads(out)["tags"][0]["problems"] == [message]


def test_a_metadata_file_linked_from_outside_is_refused(tmp_path: Path) -> None:
    from zero_core.checkpoint import CheckpointError, SavedCheckpoint

    tag = tmp_path / "legacy" / "global_step2"
    shutil.copytree(LEGACY, tmp_path / "legacy")
    (tag / ".metadata").rename(tmp_path / "elsewhere.metadata")
    (tag / ".metadata").symlink_to(tmp_path / "elsewhere.metadata")
    with pytest.raises(CheckpointError, match=f"^{tag / '.metadata'} is a link to {tmp_path / 'elsewhere.metadata'}, "
                                              "outside the checkpoint's directory"):
        SavedCheckpoint.open(tmp_path / "legacy")


def test_inspect_lists_only_directories_that_are_tags(tmp_path: Path, capsys: Any) -> None:
    shutil.copytree(LEGACY, tmp_path / "ckpts")
    (tmp_path / "ckpts" / "logs").mkdir()  # another program's directory beside the tags
    (tmp_path / "ckpts" / "logs" / "run.txt").write_text("x")
    code, out, _ = run_main(capsys, "checkpoint", "inspect", str(tmp_path / "ckpts"), "--json")
    assert code == 0 and [summary["tag"] for summary in json.loads(out)["tags"]] == ["global_step2"]
    code, out, err = run_main(capsys, "checkpoint", "inspect", str(tmp_path / "ckpts" / "logs"))
    assert (code, out) == (2, "")
    assert err == (f"zero: error: {tmp_path / 'ckpts' / 'logs'} is not a checkpoint directory: none of its "
                   "directories holds zero_checkpoint.json, .metadata or zero_manifest.json (a checkpoint directory, "
                   "the save_dir given to save_checkpoint, holds one directory per tag with those files)\n")


pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")
