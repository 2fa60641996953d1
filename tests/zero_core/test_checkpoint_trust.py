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


CLIENT_STATE = {"epoch": 3, "mask": torch.ones(2), "seen": {1, 2}, "pair": (0.5, "a"), "nested": {"k": [None, b"x"]}}


def _tamper_metadata(saved: Path, root: Path, marker: Path) -> None:
    shutil.copytree(saved, root)
    (root / "good" / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    # Whoever replaces a file can remove the manifest too (it then reads as an older, unverified tag): the
    # restricted unpickler is what must stop the payload.
    (root / "good" / "zero_manifest.json").unlink()


def _load(root: Path, trust: bool) -> str:
    engine = small_trained_engine()
    try:
        engine.load_checkpoint(root, trust_checkpoint=trust)
        return "loaded"
    except ZeroError as error:
        return str(error)
    finally:
        engine.destroy()


def _client_state(root: Path) -> dict[str, Any]:
    engine = small_trained_engine()
    _, client_state = engine.load_checkpoint(root)
    engine.destroy()
    return dict(client_state)


def _every_engine_call(rank: int, world_size: int, tmp: str) -> dict[str, Any]:
    """Every save and load the tests look at, in one 1-rank job (one spawn, not eight); the paths are `_paths(tmp)`."""
    paths = _paths(Path(tmp))
    save_small_checkpoint(rank, world_size, str(paths["saved"]), "good", CLIENT_STATE)
    _tamper_metadata(paths["saved"], paths["tampered"], paths["tampered marker"])
    results: dict[str, Any] = {"client state": _client_state(paths["saved"]),
                               "tampered": _load(paths["tampered"], False)}
    _save_with_training_payload(paths["training"], paths["training marker"])
    results["training"] = _load(paths["training"], False)
    results["training ran untrusted"] = paths["training marker"].exists()
    results["training trusted"] = _load(paths["training"], True)  # the user trusts it: it runs, as asked
    results["refused"] = _refused_client_states(paths["refused"])
    results["deepspeed"] = _load(paths["deepspeed"], False)
    return results


def _paths(tmp: Path) -> dict[str, Path]:
    return {"saved": tmp / "checkpoints", "tampered": tmp / "tampered", "tampered marker": tmp / "tampered.ran",
            "training": tmp / "training", "training marker": tmp / "training.ran", "refused": tmp / "refused",
            "deepspeed": tmp / "ds", "deepspeed marker": tmp / "ds.ran"}


EngineCalls = tuple[dict[str, Path], dict[str, Any]]  # (_paths(tmp), _every_engine_call's results)


@pytest.fixture(scope="module")
def engine_calls(tmp_path_factory: pytest.TempPathFactory) -> EngineCalls:
    """The paths `_every_engine_call` wrote (and the DeepSpeed save_dir made here first) and its results."""
    tmp = tmp_path_factory.mktemp("trust")
    paths = _paths(tmp)
    _deepspeed_dir(paths["deepspeed"], paths["deepspeed marker"])
    return paths, run_ranks(_every_engine_call, 1, str(tmp), timeout=240)[0]


def test_a_valid_checkpoint_loads_its_client_state_without_trust(engine_calls: EngineCalls) -> None:
    state = engine_calls[1]["client state"]
    assert state["epoch"] == 3 and torch.equal(state["mask"], torch.ones(2)) and state["seen"] == {1, 2}
    assert state["pair"] == (0.5, "a") and state["nested"] == {"k": [None, b"x"]}


def test_a_replaced_metadata_file_runs_in_no_reader(engine_calls: EngineCalls, tmp_path: Path, capsys: Any) -> None:
    from zero_core import get_fp32_state_dict_from_zero_checkpoint

    paths, results = engine_calls
    root, marker, message = paths["tampered"], paths["tampered marker"], results["tampered"]
    assert "posix.system" in message and "trust_checkpoint=True" in message, message
    code, out, _ = run_main(capsys, "checkpoint", "inspect", str(root))
    assert code == 1 and "complete" in out and "posix.system" in out, out
    code, out, err = run_main(capsys, "checkpoint", "export", str(root), str(tmp_path / "hf"))
    assert (code, out) == (2, "") and "posix.system" in err and "--trust-checkpoint" in err, err
    with pytest.raises(ZeroError, match="posix.system"):
        get_fp32_state_dict_from_zero_checkpoint(root)
    assert not marker.exists(), "the payload ran"


def _save_with_training_payload(root: Path, marker: Path) -> None:
    """A valid checkpoint whose `training` object is a payload, as a tampered DCP data file would carry it."""
    from zero_core.checkpoint import _save

    real = _save.save_object

    def tampered(value: Any) -> io.BytesIO:
        return real(Payload(marker)) if isinstance(value, dict) and "counters" in value else real(value)

    _save.save_object = tampered
    try:
        engine = small_trained_engine()
        engine.save_checkpoint(root, tag="evil")
        engine.destroy()
    finally:
        _save.save_object = real  # the later saves of the same process are untampered


def test_a_replaced_training_object_runs_only_when_trusted(engine_calls: EngineCalls) -> None:
    paths, results = engine_calls
    message = results["training"]
    assert "`training` object" in message and "posix.system" in message, message
    assert not results["training ran untrusted"], "the payload ran"
    message = results["training trusted"]
    assert paths["training marker"].exists() and "its `training` object is a int, not zero's training state" \
        in message, message


def _refused_client_states(root: Path) -> list[str]:
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


def test_client_state_that_would_run_code_is_refused_at_save_naming_its_key(engine_calls: EngineCalls) -> None:
    paths, results = engine_calls
    root = paths["refused"]
    lambda_, listed, array, generator = results["refused"]
    assert "client_state['fn'] is a builtins.function" in lambda_, lambda_
    assert "client_state=...) must be a dict (got a list)" in listed, listed
    assert "client_state['rng'] is a numpy.ndarray" in array and "torch.from_numpy" in array, array
    assert "client_state['deep']['gen'] is a torch._C.Generator" in generator, generator
    assert not root.exists() or not any(root.iterdir()), "nothing was written"


def _deepspeed_dir(save_dir: Path, marker: Path) -> Path:
    """DeepSpeed's save_dir layout whose model-states file is a payload."""
    tag = save_dir / "global_step1"
    tag.mkdir(parents=True)
    torch.save({"module": {"w": torch.ones(2)}, "payload": Payload(marker)}, tag / "mp_rank_00_model_states.pt")
    torch.save({"optimizer_state_dict": {}}, tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (save_dir / "latest").write_text("global_step1")
    return save_dir


def test_a_deepspeed_checkpoint_with_a_payload_runs_in_no_reader(engine_calls: EngineCalls, tmp_path: Path,
                                                                 capsys: Any) -> None:
    paths, results = engine_calls
    ds, marker = paths["deepspeed"], paths["deepspeed marker"]
    code, out, err = run_main(capsys, "checkpoint", "import", str(ds), str(tmp_path / "out"))
    assert (code, out) == (2, "") and "posix.system" in err and "--trust-checkpoint" in err, err
    message = results["deepspeed"]
    assert "posix.system" in message, message
    assert not marker.exists(), "the payload ran"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_inspect_names_a_deepspeed_checkpoint_and_the_import(tmp_path: Path, capsys: Any) -> None:
    ds = _deepspeed_dir(tmp_path / "ds", tmp_path / "ran")
    for target in (ds, ds / "global_step1"):
        code, out, err = run_main(capsys, "checkpoint", "inspect", str(target))
        assert (code, out) == (2, "") and "is a DeepSpeed checkpoint" in err and "zero checkpoint import" in err, err
        assert len(err.strip().splitlines()) == 1
