"""Exact parameter counts from Hugging Face configs and presets, without transformers."""
from __future__ import annotations

import json

import pytest
from zero_estimate import PRESETS, EstimateError, LoraSpec, from_hf_config, from_preset

# Published counts of the preset models (with the head each checkpoint is trained with).
KNOWN_TOTALS = {
    "pythia-6.9b": 6_857_302_016,
    "llama-2-7b": 6_738_415_616,
    "llama-2-70b": 68_976_648_192,
    "mistral-7b": 7_241_732_096,
    "t5-3b": 2_851_598_336,
    "gpt2-xl": 1_557_611_200,
}


@pytest.mark.parametrize("name", sorted(KNOWN_TOTALS))
def test_presets_have_their_published_parameter_counts(name):
    assert from_preset(name).total_params == KNOWN_TOTALS[name]


def test_bert_large_counts_with_and_without_its_head():
    assert from_preset("bert-large", head=False).total_params == 335_141_888  # BertModel, with pooler
    mlm = from_preset("bert-large").total_params  # BertForMaskedLM: no pooler; transform, LayerNorm and bias
    assert mlm == 335_141_888 - (1024 * 1024 + 1024) + (1024 * 1024 + 1024) + 2 * 1024 + 30522


def test_pythia_persistent_params_match_deepspeeds_log():
    # DeepSpeed's stage-3 log for Pythia-6.9b at threshold 1e4: "794624 in 194 params".
    assert from_preset("pythia-6.9b").persistent_params(10_000) == 794_624


def test_t5_3b_largest_layer_is_the_shared_embedding_deepspeed_reports_as_32m():
    assert from_preset("t5-3b").largest_layer_params == 32128 * 1024


def test_lora_freezes_the_base_and_adds_rank_r_adapters():
    spec = from_preset("pythia-6.9b", lora=LoraSpec(128))
    per_layer = 128 * ((4096 + 3 * 4096) + (4096 + 4096) + (4096 + 16384) + (16384 + 4096))
    assert spec.trainable_params == 32 * per_layer  # 268,435,456
    assert spec.total_params == 6_857_302_016 + spec.trainable_params
    q_and_v = from_preset("llama-2-7b", lora=LoraSpec(8, ("q_proj", "v_proj")))
    assert q_and_v.trainable_params == 32 * 2 * 8 * (4096 + 4096)  # 4,194,304


def test_grouped_query_attention_shrinks_k_and_v():
    base = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8, "num_hidden_layers": 1}
    full, grouped = from_hf_config(base), from_hf_config({**base, "num_key_value_heads": 2})
    assert full.total_params - grouped.total_params == 2 * 64 * (64 - 16)


def test_config_file_and_model_folder_are_read(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(PRESETS["gpt2-xl"]))
    assert from_hf_config(tmp_path).total_params == KNOWN_TOTALS["gpt2-xl"]
    assert from_hf_config(tmp_path / "config.json").name == "config.json"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"hidden_size": 8}, "no model_type key; supported model types: bert, gpt2"),
        ({"model_type": "falcon"}, "model_type: unknown model type 'falcon'; choose from"),
        ({"model_type": "lama"}, "did you mean 'llama'?"),
        ({"model_type": "gpt2", "n_layer": 0}, "n_layer: must be at least 1 (got 0)"),
        ({"model_type": "bert", "hidden_size": 100}, "hidden_size (100) must be a multiple of num_attention_heads"),
        ({"model_type": "llama", "num_key_value_heads": 5}, "num_attention_heads (32) must be a multiple of"),
        ({"model_type": "t5", "feed_forward_proj": "a-b"}, "feed_forward_proj must be 'ACT' or 'gated-ACT'"),
    ],
)
def test_bad_configs_name_the_key_and_what_it_must_be(config, message):
    with pytest.raises(EstimateError) as raised:
        from_hf_config(config)
    assert message in str(raised.value)


def test_unreadable_or_malformed_files_say_what_is_wrong(tmp_path):
    with pytest.raises(EstimateError, match="cannot read .*missing.json"):
        from_hf_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "gpt2",')
    with pytest.raises(EstimateError, match="bad.json is not valid JSON: .* at line 1 column 23"):
        from_hf_config(bad)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(EstimateError, match="holds a JSON list, not an object"):
        from_hf_config(listed)


def test_unknown_preset_and_lora_target_suggest_the_nearest_name():
    with pytest.raises(EstimateError, match="unknown preset 'pythia-6.8b'; did you mean 'pythia-6.9b'"):
        from_preset("pythia-6.8b")
    with pytest.raises(EstimateError, match="unknown LoRA target 'vproj'; did you mean 'v_proj'"):
        from_preset("llama-2-7b", lora=LoraSpec(8, ("vproj",)))
