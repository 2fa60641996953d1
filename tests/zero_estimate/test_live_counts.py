"""Counting a live nn.Module: tied weights once, and right where DeepSpeed's data_ptr() count is wrong."""
from __future__ import annotations

import pytest
import zero_estimate
from zero_estimate import EstimateError, from_module, stage3, stage_1_and_2

torch = pytest.importorskip("torch")


def _tied_model(device: str = "cpu"):
    with torch.device(device):
        model = torch.nn.Sequential(torch.nn.Embedding(100, 8), torch.nn.Linear(8, 16), torch.nn.Linear(8, 100))
    model[2].weight = model[0].weight  # an LM head tied to the embedding
    return model


TOTAL = 100 * 8 + (8 * 16 + 16) + 100  # embedding, linear, the head's own bias
LARGEST = 100 * 8 + 100  # the head: tied weight and bias


def test_tied_weights_count_once_and_toward_each_layer_they_serve():
    assert stage3.model_to_params(_tied_model()) == (TOTAL, LARGEST)
    assert stage_1_and_2.model_to_params(_tied_model()) == TOTAL


def test_meta_device_models_count_every_parameter():
    # DeepSpeed keys by data_ptr(), which is 0 for every meta tensor: it would count one param.
    model = _tied_model("meta")
    assert {p.data_ptr() for p in model.parameters()} == {0}
    assert stage3.model_to_params(model) == (TOTAL, LARGEST)


def test_partitioned_models_count_full_sizes_from_ds_numel():
    model = _tied_model()
    for param in model.parameters():  # what ZeRO-3 leaves behind: an empty placeholder and the real size
        param.ds_numel, param.ds_shape = param.numel(), tuple(param.shape)
        param.data = torch.empty(0)
    assert stage3.model_to_params(model) == (TOTAL, LARGEST)
    assert from_module(model).total_params == TOTAL


def test_all_live_prints_the_table_for_the_counted_model(capsys):
    rows = zero_estimate.estimate_zero3_model_states_mem_needs_all_live(_tied_model("meta"), num_gpus_per_node=2)
    assert "SW: Model with 0M total params, 0M largest layer params." in capsys.readouterr().out
    assert rows[-1].gpu_bytes == 4 * LARGEST + 18 * TOTAL // 2


def test_from_module_splits_trainable_frozen_and_finds_linear_weights():
    model = _tied_model()
    model[1].requires_grad_(False)
    spec = from_module(model)
    assert (spec.total_params, spec.trainable_params, spec.largest_layer_params) == (TOTAL, TOTAL - 144, LARGEST)
    assert spec.linear_weight_params() == 8 * 16 + 100 * 8
    assert spec.shape is None  # a plain module has no transformer shape: activations are not estimated


def test_a_module_without_parameters_or_a_non_module_is_rejected():
    with pytest.raises(EstimateError, match="model: the model has no parameters"):
        stage3.model_to_params(torch.nn.ReLU())
    with pytest.raises(EstimateError, match="expected a torch.nn.Module"):
        stage_1_and_2.model_to_params([1, 2])
