"""Every preset counts the parameters its model card publishes (to 0.5%): the keys copied from each
config.json (zero_plugins.model_presets) decide the count, so a wrong or missing key shows here."""
from __future__ import annotations

import pytest
from zero_estimate import from_preset
from zero_plugins.model_presets import PRESETS, causal_lm_presets

PUBLISHED = {  # parameters, as the model cards and papers give them
    "pythia-1.4b": 1.414e9, "pythia-6.9b": 6.857e9, "pythia-12b": 11.846e9, "gpt-neox-20b": 20.55e9,
    "llama-2-7b": 6.738e9, "llama-2-13b": 13.016e9, "llama-2-70b": 68.977e9, "llama-3-8b": 8.03e9,
    "llama-3-70b": 70.55e9, "mistral-7b": 7.242e9, "qwen2-1.5b": 1.54e9, "qwen2-7b": 7.62e9, "opt-6.7b": 6.66e9,
    "opt-13b": 12.85e9, "gpt2-xl": 1.558e9, "t5-3b": 2.85e9, "bert-large": 0.336e9,
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_preset_counts_its_published_parameters(name: str) -> None:
    assert from_preset(name).total_params == pytest.approx(PUBLISHED[name], rel=0.005)


def test_zero_profile_builds_the_causal_language_models_only() -> None:
    assert "t5-3b" not in causal_lm_presets() and "bert-large" not in causal_lm_presets()
    assert set(causal_lm_presets()) == set(PRESETS) - {"t5-3b", "bert-large"}
