"""The `zero_estimate_memory` hook `zero profile` calls: a live model, a ds_config, and Estimate.as_dict() back.

Skips where transformers (and torch) are not installed, as in the zero-estimate tox envs.
"""
from __future__ import annotations

from dataclasses import replace

import pytest
from zero_estimate import Cluster, EstimateError, estimate, from_module, settings_from_ds_config
from zero_estimate._plugin import zero_estimate_check, zero_estimate_memory

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

DS = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 1,
    "bf16": {"enabled": True},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
    "zero_optimization": {"stage": 1},
}


def _model(frozen: tuple[str, ...] = ()):
    config = transformers.GPTNeoXConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, vocab_size=512
    )
    torch.manual_seed(0)
    model = transformers.GPTNeoXForCausalLM(config)
    for name, param in model.named_parameters():
        if name.startswith(frozen):
            param.requires_grad_(False)
    return model


def _request(model, **changes):
    return {"module": model, "ds_config": DS, "world_size": 2, "seq_len": 64, "stage": 0, **changes}


def _bytes(result, category):
    return sum(line["bytes"] for line in result["lines"] if line["category"] == category)


def test_the_answer_is_the_estimate_of_the_module_with_the_config():
    model = _model()
    result = zero_estimate_memory(_request(model, stage=2, checkpointing="full"))
    training, zero = settings_from_ds_config(DS, 2, checkpointing="full", seq_len=64)
    expected = estimate(from_module(model), Cluster(gpus_per_node=2), training, replace(zero, stage=2)).as_dict()
    assert result == expected
    assert result["stage"] == 2  # the request's stage, not the config's 1
    assert result["inputs"]["precision"] == "bf16" and result["inputs"]["micro_batch"] == 2
    assert result["activation_checkpointing"]["checkpointing"] == "full"


@pytest.mark.parametrize(("device", "params", "impl"), [
    ("cpu", {}, "single-tensor"),  # torch's default on a CPU device
    ("cuda", {}, "foreach"),  # and on a GPU
    ("cpu", {"foreach": True}, "foreach"),  # the config's choice stands on either
    ("cuda", {"fused": True}, "fused"),
])
def test_the_optimizer_steps_as_torch_would_on_the_device(device, params, impl):
    ds = {**DS, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, **params}}}
    assert zero_estimate_memory(_request(_model(), ds_config=ds, device=device))["inputs"]["optimizer_impl"] == impl


def test_model_states_follow_requires_grad():
    full = zero_estimate_memory(_request(_model()))
    frozen_names = ("gpt_neox.embed_in", "gpt_neox.layers.0")
    partly = _model(frozen_names)
    result = zero_estimate_memory(_request(partly))
    total = sum(p.numel() for p in partly.parameters())
    trainable = sum(p.numel() for p in partly.parameters() if p.requires_grad)
    assert 0 < trainable < total
    # stage 0, bf16 with AdamW: 16-bit params of every param; gradients, fp32 master and m, v of the trainable ones
    assert _bytes(result, "param.persistent") == _bytes(full, "param.persistent") == 2 * total
    assert _bytes(result, "grad.full") == 2 * trainable and _bytes(full, "grad.full") == 2 * total
    assert _bytes(result, "optim.master") == 4 * trainable and _bytes(full, "optim.master") == 4 * total
    # Adam's m and v, and a 4-byte step count for the one master tensor (this small model is one bucket);
    # torch makes them in the first step, so they are not there at init
    assert _bytes(result, "optim.state") == 8 * trainable + 4
    assert result["categories"]["gpu"]["step"]["optim.state"] == 8 * trainable + 4
    assert "optim.state" not in result["categories"]["gpu"]["init"]


def test_the_entry_point_provides_the_hook(plugin_manager):
    impls = plugin_manager.hook.zero_estimate_memory.get_hookimpls()
    assert [impl.function for impl in impls] == [zero_estimate_memory]
    assert [impl.function for impl in plugin_manager.hook.zero_estimate_check.get_hookimpls()] == [zero_estimate_check]


CPU_CHECKPOINTING = {**DS, "activation_checkpointing": {"cpu_checkpointing": True, "partition_activations": True,
                                                        "number_checkpoints": 5}}


def test_the_activation_checkpointing_block_acts_only_through_zero_core_checkpointing():
    model = _model()
    via_zero = zero_estimate_memory(_request(model, ds_config=CPU_CHECKPOINTING, checkpointing="full"))
    via_torch = zero_estimate_memory(_request(model, ds_config=CPU_CHECKPOINTING, checkpointing="full",
                                              checkpointing_via="torch"))
    plain = zero_estimate_memory(_request(model, checkpointing="full"))
    assert via_zero["activation_checkpointing"]["cpu_checkpointing"] is True
    assert via_torch == plain, "torch.utils.checkpoint never reads the block"
    assert via_zero != plain


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"stage": 2, "ds_config": {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}},
         "zero_optimization.offload_param.device: offloading params needs ZeRO stage 3"),
        ({"stage": 5}, "stage: must be 0, 1, 2 or 3"),
        ({"world_size": 0}, "world_size: must be at least 1"),
        ({"seq_len": "64"}, "seq_len: must be a number"),
        ({"checkpointing": "some"}, "checkpointing: unknown value 'some'"),
        ({"ds_config": {"optimizer": {"type": "Lion"}}}, "optimizer.type: the estimate models Adam, AdamW, SGD, Adafactor, not 'Lion'"),
        ({"module": object()}, "model: "),
    ],
)
def test_bad_requests_are_one_line_errors(changes, message):
    with pytest.raises(EstimateError) as caught:
        zero_estimate_memory(_request(_model(), **changes))
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    if "module" not in changes:  # the check refuses the same settings without a module
        request = _request(None, **changes)
        del request["module"]
        with pytest.raises(EstimateError) as checked:
            zero_estimate_check(request)
        assert str(checked.value) == str(caught.value)


def test_the_check_takes_what_the_estimate_takes():
    assert zero_estimate_check({"ds_config": DS, "world_size": 2, "seq_len": 64, "stage": 3,
                                "checkpointing_via": "torch"}) is None
    with pytest.raises(EstimateError, match="^checkpointing_via: unknown value 'hf'"):
        zero_estimate_check({"ds_config": DS, "world_size": 2, "seq_len": 64, "stage": 3, "checkpointing_via": "hf"})


def test_a_missing_key_is_named():
    request = _request(_model())
    del request["seq_len"]
    with pytest.raises(EstimateError, match="^request: missing seq_len; pass all of module, ds_config"):
        zero_estimate_memory(request)
