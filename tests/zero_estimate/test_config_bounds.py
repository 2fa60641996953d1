"""A config.json's shape keys are bounded exactly as the --layers/--hidden-size/--heads/--vocab-size flags are
(one table, _checks.LIMITS), heads divide the hidden size (flags, config and API) and key/value heads divide the
heads, and a config whose keys are each in bounds but describe more than 1e15 parameters is refused as --params."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_main
from zero_estimate import EstimateError, TransformerShape, from_hf_config, from_numbers

pytest.importorskip("zero_cli")

SHAPE_FLAGS = ["--layers", "32", "--hidden-size", "64", "--heads", "4"]


def _config_error(config: dict[str, Any]) -> str:
    with pytest.raises(EstimateError) as caught:
        from_hf_config(config)
    return str(caught.value)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code, out, err = run_main(capsys, "estimate", *args)
    assert out == "" or code == 0
    return code, err


@pytest.mark.parametrize(("config", "flag", "bound"), [
    ({"model_type": "gpt2", "n_layer": 10_001}, "--layers", "1e4 layers (got 10001)"),
    ({"model_type": "llama", "hidden_size": 2**20 + 1}, "--hidden-size", "2**20 = 1048576 (got 1048577)"),
    ({"model_type": "llama", "num_attention_heads": 2**20 + 1}, "--heads", "2**20 = 1048576 heads (got 1048577)"),
    ({"model_type": "gpt2", "vocab_size": 2**24 + 1}, "--vocab-size", "2**24 = 16777216 tokens (got 16777217)"),
])
def test_a_config_key_has_the_bound_of_its_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                config: dict[str, Any], flag: str, bound: str) -> None:
    key = next(name for name in config if name != "model_type")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    too_much = str(config[key])
    assert _cli(capsys, "--config", str(path)) == (
        2, f"zero: error: --config {path}: {key}: must be at most {bound}; check the number and its unit\n")
    flags = dict(zip(SHAPE_FLAGS[::2], SHAPE_FLAGS[1::2])) | {flag: too_much}
    args = [part for pair in flags.items() for part in pair]
    assert _cli(capsys, "--params", "7B", *args) == (
        2, f"zero: error: {flag}: must be at most {bound}; check the number and its unit\n")


def test_the_layer_bound_itself_is_estimated_in_a_moment(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    per_layer = (from_hf_config({"model_type": "gpt2", "n_layer": 2}).total_params
                 - from_hf_config({"model_type": "gpt2", "n_layer": 1}).total_params)
    one_layer = from_hf_config({"model_type": "gpt2", "n_layer": 1}).total_params
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "gpt2", "n_layer": 10000}')
    code, out, _ = run_main(capsys, "estimate", "--config", str(path), "--stage", "3", "--json")
    assert code == 0
    assert json.loads(out)["model"]["total_params"] == one_layer + 9_999 * per_layer


@pytest.mark.parametrize(("config", "message"), [
    ({"model_type": "gpt2", "n_layer": 1e7},
     "n_layer: must be at most 1e4 layers (got 10000000); check the number and its unit"),
    ({"model_type": "llama", "hidden_size": 1e12},
     "hidden_size: must be at most 2**20 = 1048576 (got 1000000000000); check the number and its unit"),
    ({"model_type": "llama", "num_hidden_layers": -2}, "num_hidden_layers: must be at least 1 (got -2)"),
    ({"model_type": "llama", "hidden_size": 4096.5}, "hidden_size: must be a whole number (got 4096.5)"),
    ({"model_type": "gpt2", "n_head": "12"}, "n_head: must be a number (got '12')"),
    ({"model_type": "llama", "hidden_size": True}, "hidden_size: must be a number (got True)"),
    ({"model_type": "llama", "hidden_size": None}, "hidden_size: must be an integer (got None)"),
    ({"model_type": "gpt2", "n_positions": 2**24 + 1},
     "n_positions: must be at most 2**24 = 16777216 positions (got 16777217); check the number and its unit"),
    ({"model_type": "t5", "d_ff": 2**21}, "d_ff: must be at most 2**20 = 1048576 (got 2097152); check the number "
                                          "and its unit"),
    ({"model_type": "gpt2", "attn_pdrop": 5}, "attn_pdrop: must be a dropout probability from 0 to 1 (got 5)"),
    ({"model_type": "gpt2", "resid_pdrop": math.nan}, "resid_pdrop: must be a dropout probability from 0 to 1 (got nan)"),
    ({"model_type": "gpt2", "attn_pdrop": "0.1"}, "attn_pdrop: must be a dropout probability from 0 to 1 (got '0.1')"),
])
def test_absurd_config_values_are_one_error_naming_the_key(config: dict[str, Any], message: str) -> None:
    assert _config_error(config) == message


def test_whole_floats_and_null_optional_keys_read_as_transformers_reads_them() -> None:
    llama = from_hf_config({"model_type": "llama"}).total_params
    assert from_hf_config({"model_type": "llama", "hidden_size": 4.096e3}).total_params == llama
    assert from_hf_config({"model_type": "llama", "num_key_value_heads": None}).total_params == llama
    assert from_hf_config({"model_type": "gpt2", "attn_pdrop": 1}).shape.attention_dropout is True  # type: ignore[union-attr]


@pytest.mark.parametrize(("config", "message"), [
    ({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 3},
     "llama: hidden_size (4096) must be a multiple of num_attention_heads (3)"),
    ({"model_type": "qwen2", "num_key_value_heads": 5},
     "qwen2: num_attention_heads (32) must be a multiple of num_key_value_heads (5)"),
    ({"model_type": "phi", "num_key_value_heads": 5},
     "phi: num_attention_heads (32) must be a multiple of num_key_value_heads (5)"),
    ({"model_type": "gpt2", "n_embd": 768, "n_head": 7}, "gpt2: n_embd (768) must be a multiple of n_head (7)"),
])
def test_heads_divide_the_hidden_size_and_key_value_heads_divide_the_heads(config: dict[str, Any],
                                                                           message: str) -> None:
    assert _config_error(config) == message


def test_heads_flags_must_divide_the_hidden_size(capsys: pytest.CaptureFixture[str]) -> None:
    shape = ["--layers", "32", "--hidden-size", "4096"]
    assert _cli(capsys, "--params", "7B", *shape, "--heads", "3") == (
        2, "zero: error: --hidden-size (4096) must be a multiple of --heads (3)\n")
    assert _cli(capsys, "--params", "7B", *shape, "--heads", "32")[0] == 0


@pytest.mark.parametrize(("shape", "message"), [
    (TransformerShape(32, 4096, 3, 0), "hidden_size (4096) must be a multiple of num_heads (3)"),
    (TransformerShape(10**7, 4096, 32, 0),
     "num_layers: must be at most 1e4 layers (got 10000000); check the number and its unit"),
    (TransformerShape(32, 4096, 32, -1), "vocab_size: must be at least 0 (got -1)"),
])
def test_the_api_checks_a_shape_as_the_flags_do(shape: TransformerShape, message: str) -> None:
    with pytest.raises(EstimateError) as caught:
        from_numbers(7 * 10**9, shape=shape)
    assert str(caught.value) == message


def test_keys_each_in_bounds_may_not_add_up_to_more_than_params_allows() -> None:
    base = {"model_type": "llama", "hidden_size": 2**20}
    one, two = (from_hf_config({**base, "num_hidden_layers": n}).total_params for n in (1, 2))
    total = one + 9_999 * (two - one)
    assert total > 10**15
    assert _config_error({**base, "num_hidden_layers": 10_000}) == (
        f"llama: the config describes {total:.3g} parameters, more than the 1e15 any estimate takes (as --params); "
        "check its sizes (hidden size, layers, vocabulary)")
