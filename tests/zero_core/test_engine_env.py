"""Integer environment variables that zero reads (torchrun's, Open MPI's local rank) are one error naming the
variable and the form expected, never torch's or Python's bare "invalid literal for int()"."""
from __future__ import annotations

import argparse
from typing import Any

import pytest
import torch
import torch.distributed as dist
import zero_core
from zero_core import comm
from zero_plugins import EnvVarError, ZeroError

pytestmark = pytest.mark.usefixtures("solo_process_group")

LAUNCHER = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def _config(**zero: Any) -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
            "zero_optimization": {"stage": 2, **zero}}


def _model() -> torch.nn.Module:
    return torch.nn.Linear(4, 2)


@pytest.mark.parametrize(("variable", "value", "minimum"), [
    ("LOCAL_WORLD_SIZE", "abc", 1), ("LOCAL_WORLD_SIZE", "0", 1), ("LOCAL_RANK", "abc", 0), ("LOCAL_RANK", "-1", 0),
])
def test_initialize_names_a_bad_local_variable(monkeypatch: pytest.MonkeyPatch, variable: str, value: str,
                                               minimum: int) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(EnvVarError, match=rf"^{variable}='{value}' is not a whole number >= {minimum}: set it to one"):
        zero_core.initialize(model=_model(), config=_config(offload_optimizer={"device": "cpu"}))


@pytest.mark.parametrize(("variable", "value", "minimum"), [
    ("RANK", "zero", 0), ("RANK", "-1", 0), ("WORLD_SIZE", "two", 1), ("WORLD_SIZE", "0", 1),
    ("MASTER_PORT", "http", 1), ("LOCAL_RANK", "1.0", 0),
])
def test_joining_from_a_launchers_environment_names_a_bad_variable(monkeypatch: pytest.MonkeyPatch, variable: str,
                                                                   value: str, minimum: int) -> None:
    for name, default in LAUNCHER.items():
        monkeypatch.setenv(name, default)
    monkeypatch.setenv(variable, value)
    with pytest.raises(EnvVarError, match=rf"^{variable}='{value}' is not a whole number >= {minimum}"):
        zero_core.init_distributed()
    assert not dist.is_initialized()  # refused before torch was asked to join


def test_a_rank_beyond_the_world_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, default in {**LAUNCHER, "RANK": "2"}.items():
        monkeypatch.setenv(name, default)
    with pytest.raises(ZeroError, match=r"^RANK=2 is not below WORLD_SIZE=2: ranks count from 0"):
        zero_core.init_distributed()


def test_get_local_rank_names_the_variable_it_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    zero_core.init_distributed()
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "first")
    with pytest.raises(EnvVarError, match=r"^OMPI_COMM_WORLD_LOCAL_RANK='first' is not a whole number >= 0"):
        comm.get_local_rank()
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3")
    assert comm.get_local_rank() == 3
    monkeypatch.setenv("LOCAL_RANK", "1")  # torchrun's wins
    assert comm.get_local_rank() == 1


def test_args_local_rank_against_a_bad_local_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "abc")
    with pytest.raises(EnvVarError, match=r"^LOCAL_RANK='abc' is not a whole number >= 0"):
        zero_core.initialize(args=argparse.Namespace(local_rank=0), model=_model(), config=_config())
