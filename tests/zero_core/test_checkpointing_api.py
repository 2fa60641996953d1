"""zero_core.checkpointing: DeepSpeed's configure / is_configured / checkpoint calls, and the config block."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from zero_plugins import ZeroError

from zero_core.checkpointing import (
    checkpoint,
    configure,
    is_configured,
    non_reentrant_checkpoint,
    reset,
    settings,
    unconfigure,
)
from zero_plugins.ds_config import ConfigError, load_config


@pytest.fixture(autouse=True)
def _defaults() -> Iterator[None]:
    unconfigure()
    yield
    unconfigure()


def test_configure_starts_from_the_defaults_then_the_block_then_the_arguments() -> None:
    assert not is_configured() and settings().cpu_checkpointing is False
    configure(None, deepspeed_config={"activation_checkpointing": {"cpu_checkpointing": True, "profile": True}},
              profile=False)
    assert is_configured()
    assert settings().cpu_checkpointing is True and settings().profile is False
    configure(None)  # DeepSpeed resets to the defaults on every call
    assert settings().cpu_checkpointing is False and is_configured()


def test_configure_checks_contiguous_memory_as_deepspeed_does() -> None:
    with pytest.raises(ConfigError, match="needs partition_activations"):
        configure(None, contiguous_checkpointing=True)
    with pytest.raises(ConfigError, match="number_checkpoints: is required"):
        configure(None, partition_activations=True, contiguous_checkpointing=True)
    configure(None, partition_activations=True, contiguous_checkpointing=True, num_checkpoints=4)
    assert settings().number_checkpoints == 4


def test_configure_rejects_model_parallelism() -> None:
    with pytest.raises(ZeroError, match="model parallelism"):
        configure(object())


@pytest.mark.parametrize(("block", "message"), [
    ({"contiguous_memory_optimization": True}, "activation_checkpointing.contiguous_memory_optimization: needs"),
    ({"cpu_checkpoint": True}, 'did you mean "cpu_checkpointing"'),
    ({"profile": 1}, "activation_checkpointing.profile: must be true or false"),
    ({"number_checkpoints": 0}, "activation_checkpointing.number_checkpoints: must be > 0"),
])
def test_block_errors_name_the_key(block: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config({"activation_checkpointing": block})


def test_block_is_absent_by_default_and_read_when_given() -> None:
    assert load_config({}).activation_checkpointing is None
    block = load_config({"activation_checkpointing": {"synchronize_checkpoint_boundary": True}}).activation_checkpointing
    assert block is not None and block.synchronize_checkpoint_boundary and not block.cpu_checkpointing
    assert "activation_checkpointing" not in load_config({"activation_checkpointing": {}}).ignored_keys


@pytest.mark.parametrize("cpu", [False, True])
@pytest.mark.parametrize("call", [checkpoint, non_reentrant_checkpoint])
def test_checkpointed_gradients_equal_the_plain_ones(call, cpu: bool) -> None:  # type: ignore[no-untyped-def]
    configure(None, checkpoint_in_cpu=cpu, synchronize=True, profile=True)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.GELU(), torch.nn.Linear(8, 8))
    x = torch.randn(4, 8, requires_grad=True)

    def run(function):  # type: ignore[no-untyped-def]
        net.zero_grad()
        x.grad = None
        torch.manual_seed(1)  # dropout's mask: the re-run must draw the same one
        out = function(x)
        out.square().sum().backward()
        return [out.detach(), x.grad.clone(), *(p.grad.clone() for p in net.parameters())]

    plain = run(net)
    got = run(lambda t: call(lambda u, scale: net(u) * scale, t, scale=2.0) / 2.0)
    for a, b in zip(plain, got):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
    reset()


def test_non_tensor_outputs_come_back() -> None:
    x = torch.randn(3, requires_grad=True)
    out, label = checkpoint(lambda t: (t * 2, "label"), x)
    assert label == "label"
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))
