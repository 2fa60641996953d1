"""Opening a checkpoint runs no code: every reader, given files replaced by payloads, refuses and runs nothing.

The payload is a pickle whose `__reduce__` calls `os.system("touch <marker>")`: the marker existing
afterwards means the payload ran. Each reader of a zero checkpoint (engine.load_checkpoint, `zero
checkpoint inspect`, `export`, get_fp32_state_dict_from_zero_checkpoint) meets a replaced DCP
`.metadata`; load_checkpoint also meets a `training` object replaced inside a valid checkpoint; the
DeepSpeed readers (`zero checkpoint import`, load_checkpoint of DeepSpeed's save_dir) meet replaced
model-states files. `trust_checkpoint=True` is the one way to run it, and says so. client_state
that could only load by running code is refused at save time, naming its key.
"""
from __future__ import annotations

import io
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from zero_plugins import ZeroError

from cli_helpers import run_main
from engine_helpers import save_small_checkpoint, small_trained_engine
from multirank import run_ranks

class Payload:
    """Unpickling this runs a shell command that makes `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trust") / "checkpoints"
    client_state = {"epoch": 3, "mask": torch.ones(2), "seen": {1, 2}, "pair": (0.5, "a"), "nested": {"k": [None, b"x"]}}
    run_ranks(save_small_checkpoint, 1, str(root), "good", client_state, timeout=120)
    return root


def _tampered_metadata(saved: Path, tmp_path: Path) -> tuple[Path, Path]:
    root, marker = tmp_path / "tampered", tmp_path / "ran"
    shutil.copytree(saved, root)
    (root / "good" / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    return root, marker


def _load(rank: int, world_size: int, root: str, trust: bool) -> str:
    engine = small_trained_engine()
    try:
        engine.load_checkpoint(root, trust_checkpoint=trust)
        return "loaded"
    except ZeroError as error:
        return str(error)
    finally:
        engine.destroy()


def _client_state(rank: int, world_size: int, root: str) -> dict[str, Any]:
    engine = small_trained_engine()
    _, client_state = engine.load_checkpoint(root)
    engine.destroy()
    return dict(client_state)


def test_a_valid_checkpoint_loads_its_client_state_without_trust(saved: Path) -> None:
    state = run_ranks(_client_state, 1, str(saved), timeout=120)[0]
    assert state["epoch"] == 3 and torch.equal(state["mask"], torch.ones(2)) and state["seen"] == {1, 2}
    assert state["pair"] == (0.5, "a") and state["nested"] == {"k": [None, b"x"]}


def test_a_replaced_metadata_file_runs_in_no_reader(saved: Path, tmp_path: Path, capsys: Any) -> None:
    from zero_core import get_fp32_state_dict_from_zero_checkpoint

    root, marker = _tampered_metadata(saved, tmp_path)
    message = run_ranks(_load, 1, str(root), False, timeout=120)[0]
    assert "posix.system" in message and "trust_checkpoint=True" in message, message
    code, out, _ = run_main(capsys, "checkpoint", "inspect", str(root))
    assert code == 1 and "complete" in out and "posix.system" in out, out
    code, out, err = run_main(capsys, "checkpoint", "export", str(root), str(tmp_path / "hf"))
    assert (code, out) == (2, "") and "posix.system" in err and "--trust-checkpoint" in err, err
    with pytest.raises(ZeroError, match="posix.system"):
        get_fp32_state_dict_from_zero_checkpoint(root)
    assert not marker.exists(), "the payload ran"


def _save_with_training_payload(rank: int, world_size: int, root: str, marker: str) -> None:
    """A valid checkpoint whose `training` object is a payload, as a tampered DCP data file would carry it."""
    from zero_core.checkpoint import _save

    real = _save.save_object

    def tampered(value: Any) -> io.BytesIO:
        return real(Payload(Path(marker))) if isinstance(value, dict) and "counters" in value else real(value)

    _save.save_object = tampered
    engine = small_trained_engine()
    engine.save_checkpoint(root, tag="evil")
    engine.destroy()


def test_a_replaced_training_object_runs_only_when_trusted(tmp_path: Path) -> None:
    root, marker = tmp_path / "checkpoints", tmp_path / "ran"
    run_ranks(_save_with_training_payload, 1, str(root), str(marker), timeout=120)
    message = run_ranks(_load, 1, str(root), False, timeout=120)[0]
    assert "`training` object" in message and "posix.system" in message, message
    assert not marker.exists(), "the payload ran"
    message = run_ranks(_load, 1, str(root), True, timeout=120)[0]  # the user trusts it: it runs, as asked
    assert marker.exists() and "its `training` object is a int, not zero's training state" in message, message


def _refused_client_states(rank: int, world_size: int, root: str) -> list[str]:
    import numpy

    engine = small_trained_engine()
    messages = []
    for client_state in ({"fn": lambda: 1}, [1, 2], {"rng": numpy.zeros(3)}, {"deep": {"gen": torch.Generator()}}):
        try:
            engine.save_checkpoint(root, tag="refused", client_state=client_state)  # type: ignore[arg-type]
            messages.append("saved")
        except ZeroError as error:
            messages.append(str(error))
    engine.destroy()
    return messages


def test_client_state_that_would_run_code_is_refused_at_save_naming_its_key(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    lambda_, listed, array, generator = run_ranks(_refused_client_states, 1, str(root), timeout=120)[0]
    assert "client_state['fn'] is a builtins.function" in lambda_, lambda_
    assert "client_state=...) must be a dict (got a list)" in listed, listed
    assert "client_state['rng'] is a numpy.ndarray" in array and "torch.from_numpy" in array, array
    assert "client_state['deep']['gen'] is a torch._C.Generator" in generator, generator
    assert not root.exists() or not any(root.iterdir()), "nothing was written"


def _deepspeed_dir(tmp_path: Path, marker: Path) -> Path:
    """DeepSpeed's save_dir layout whose model-states file is a payload."""
    tag = tmp_path / "ds" / "global_step1"
    tag.mkdir(parents=True)
    torch.save({"module": {"w": torch.ones(2)}, "payload": Payload(marker)}, tag / "mp_rank_00_model_states.pt")
    torch.save({"optimizer_state_dict": {}}, tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (tmp_path / "ds" / "latest").write_text("global_step1")
    return tag.parent


def test_a_deepspeed_checkpoint_with_a_payload_runs_in_no_reader(tmp_path: Path, capsys: Any) -> None:
    marker = tmp_path / "ran"
    ds = _deepspeed_dir(tmp_path, marker)
    code, out, err = run_main(capsys, "checkpoint", "import", str(ds), str(tmp_path / "out"))
    assert (code, out) == (2, "") and "posix.system" in err and "--trust-checkpoint" in err, err
    message = run_ranks(_load, 1, str(ds), False, timeout=120)[0]
    assert "posix.system" in message, message
    assert not marker.exists(), "the payload ran"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_inspect_names_a_deepspeed_checkpoint_and_the_import(tmp_path: Path, capsys: Any) -> None:
    ds = _deepspeed_dir(tmp_path, tmp_path / "ran")
    for target in (ds, ds / "global_step1"):
        code, out, err = run_main(capsys, "checkpoint", "inspect", str(target))
        assert (code, out) == (2, "") and "is a DeepSpeed checkpoint" in err and "zero checkpoint import" in err, err
        assert len(err.strip().splitlines()) == 1
