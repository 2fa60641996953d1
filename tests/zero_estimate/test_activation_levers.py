"""Activation checkpointing (every k layers, cpu_checkpointing) and --explain's "What dominates the peak"."""
from __future__ import annotations

import json
import re
from typing import Any

import pytest
from zero_estimate import (
    Cluster,
    Estimate,
    EstimateError,
    Limits,
    Training,
    TransformerShape,
    ZeroSettings,
    estimate,
    from_numbers,
    from_preset,
    plan,
)
from zero_estimate._levers import dominant, dominates_text, levers, stage_shrink
from zero_estimate._plan_report import plan_text
from zero_estimate._units import gib

from cli_helpers import run_main

# A small model computed by hand: 4 layers, h 64, 4 heads, s 128, b 2, fp16, no vocabulary (no logits line).
S, B, H, A, LAYERS = 128, 2, 64, 4, 4
# Per attention score 9 B: the fp32 softmax, its 16-bit cast, and (the shape does not rule dropout out) the
# dropout mask and the dropped 16-bit copy (docs/memory-model.md, "Activations").
FULL_LAYER = 34 * S * B * H + 9 * A * S * S * B  # 557,056 + 1,179,648
ONE_INPUT = 2 * S * B * H  # one 16-bit layer input
SMALL = from_numbers(1_000_000, 100_000, shape=TransformerShape(LAYERS, H, A, 0))


def _small(gpus: int = 1, **training: Any) -> Estimate:
    return estimate(SMALL, Cluster(gpus), Training(precision="fp16", seq_len=S, micro_batch=B,
                                                   **{"attention": "eager", **training}))


def _activations(result: Estimate, where: str = "gpu") -> int:
    """The activations kept through forward and backward (not the instants' transients)."""
    return sum(line.bytes for line in result.at(where)
               if line.category == "activations" and line.phases == ("forward", "backward"))


def _transients(result: Estimate, phase: str) -> dict[str, int]:
    """The activation lines held for an instant of one phase alone, by their first words."""
    return {line.what.split(" (")[0]: line.bytes for line in result.at("gpu")
            if line.category == "activations" and line.phases == (phase,)}


def test_checkpointing_math_on_a_hand_computed_model():
    assert FULL_LAYER == 1_736_704 and ONE_INPUT == 32_768
    assert _activations(_small()) == LAYERS * FULL_LAYER
    # Every layer: 4 inputs kept, one layer rebuilt at a time in backward.
    assert _activations(_small(checkpointing="full")) == 4 * ONE_INPUT + FULL_LAYER
    # Every 2 layers: number_checkpoints 2, two layers rebuilt together.
    assert _activations(_small(checkpointing="full", checkpoint_every=2)) == 2 * ONE_INPUT + 2 * FULL_LAYER
    # Every 3 of 4 layers: ceil(4/3) = 2 checkpoints; the largest chunk rebuilt is 3 layers.
    every3 = _small(checkpointing="full", checkpoint_every=3)
    assert _activations(every3) == 2 * ONE_INPUT + 3 * FULL_LAYER
    assert every3.training.number_checkpoints(LAYERS) == 2
    assert any(line.formula == "k * (34 * s * b * h + 9 * a * s * s * b)" for line in every3.lines)
    # More layers per checkpoint than the model has: one checkpoint, the whole model rebuilt.
    assert _activations(_small(checkpointing="full", checkpoint_every=9)) == ONE_INPUT + LAYERS * FULL_LAYER


def test_eager_attention_holds_its_softmax_transients_and_a_rebuilt_layer_its_gradients():
    """Forward: one layer's fp32 scores while its softmax runs (4 B a score). Backward: the probabilities' and
    the softmax input's fp32 gradients beside the fp32 probabilities, less their 16-bit cast (4 + 4 + 4 - 6 B a
    score); a rebuilt layer holds the larger of that and its kept tensors' gradients (34sbh here)."""
    scores = A * S * S * B
    plain = _transients(_small(), "forward")
    assert plain == {"one layer's scores in fp32 while its softmax runs": 4 * scores}
    # No checkpointing: the top layer's softmax backward comes once the loss's gradients are freed (no vocabulary
    # here: the loss's are 0 bytes).
    assert list(_transients(_small(), "backward").values()) == [6 * scores]
    rebuilt = _transients(_small(checkpointing="full"), "backward")
    assert rebuilt == {"one layer's gradients as it runs backward, beside the layer rebuilt or brought back": 6 * scores}
    assert 6 * scores > 34 * S * B * H
    # A fused kernel: no scores, the rebuilt layer's gradients as large as what it keeps besides the core
    fused = _transients(_small(attention="sdpa", checkpointing="full"), "backward")
    assert list(fused.values()) == [34 * S * B * H]
    assert _transients(_small(attention="sdpa"), "forward") == {}


def test_cpu_checkpointing_moves_the_inputs_to_pinned_host_memory():
    result = _small(gpus=2, checkpointing="full", cpu_checkpointing=True)
    assert _activations(result) == FULL_LAYER
    (pinned,) = [line for line in result.at("host.pinned") if line.category == "activations"]
    assert pinned.bytes == LAYERS * ONE_INPUT and pinned.phases == ("forward", "backward")
    assert result.by_category("pinned", "forward")["activations"] == 2 * LAYERS * ONE_INPUT  # per node: 2 GPUs


@pytest.mark.parametrize("attention", ["sdpa", "flash"])
def test_a_fused_kernel_keeps_a_logsumexp_per_query_instead_of_the_probabilities(attention):
    """SDPA and FlashAttention keep the output (the output projection's input, counted in 34sbh) and an fp32
    logsumexp per query and head: 4*a*s*b bytes a layer, where eager keeps 9 B per score."""
    fused_layer = 34 * S * B * H + 4 * A * S * B
    assert _activations(_small(attention=attention)) == LAYERS * fused_layer
    # Checkpointed, the rebuilt layer is a fused one too.
    assert _activations(_small(attention=attention, checkpointing="full")) == LAYERS * ONE_INPUT + fused_layer


def test_a_fused_kernel_keeps_grouped_keys_and_values_as_narrow_as_the_projections_made_them():
    """Grouped-query attention: eager repeats K and V to every query head before keeping them, a fused
    kernel keeps them num_key_value_heads wide (Llama's attention: 5 of its 16-bit h-wide tensors are the
    block's input, Q, K, V and the output projection's input)."""
    grouped = from_numbers(1_000_000, 100_000, shape=TransformerShape(LAYERS, H, A, 0, intermediate_size=4 * H,
                                                                                 num_kv_heads=1))
    narrow = H // A  # one key/value head of the 4

    def activations(attention: str) -> int:
        return _activations(estimate(grouped, Cluster(1), Training(precision="fp16", seq_len=S, micro_batch=B,
                                                                   attention=attention)))
    assert activations("eager") == LAYERS * FULL_LAYER
    assert activations("sdpa") == LAYERS * (FULL_LAYER - 9 * A * S * S * B + 4 * A * S * B - 2 * 2 * (H - narrow) * S * B)


@pytest.mark.parametrize("checkpointing, per_layer", [("none", FULL_LAYER), ("selective", 34 * S * B * H)])
def test_offload_activations_keeps_every_layers_saved_tensors_in_pinned_host_memory(checkpointing, per_layer):
    result = _small(gpus=2, checkpointing=checkpointing, offload_activations=True)
    assert _activations(result) == per_layer, "one layer's activations on the GPU at a time"
    assert _activations(result, "host.pinned") == LAYERS * per_layer
    assert result.by_category("pinned", "backward")["activations"] == 2 * LAYERS * per_layer  # per node: 2 GPUs
    with pytest.raises(EstimateError, match="cpu_checkpointing") as error:
        Training(checkpointing="full", offload_activations=True)
    assert error.value.field == "offload_activations"


def test_checkpoint_settings_need_full_checkpointing():
    with pytest.raises(EstimateError, match="full"):
        Training(checkpoint_every=2)
    with pytest.raises(EstimateError, match="full"):
        Training(checkpointing="selective", cpu_checkpointing=True)
    with pytest.raises(EstimateError):
        Training(checkpointing="full", checkpoint_every=0)


def test_cli_flags_and_json(capsys):
    model = ["--params", "1e6", "--layers", "4", "--hidden-size", "64", "--heads", "4"]
    shape = ["--precision", "fp16", "--seq-len", "128", "--micro-batch", "2", "--stage", "0", "--attention", "eager",
             "--json"]
    code, out, _ = run_main(capsys, "estimate", *model, *shape, "--number-checkpoints", "2", "--cpu-checkpointing")
    assert code == 0
    (data,) = json.loads(out)["estimates"]
    assert data["activation_checkpointing"] == {
        "checkpointing": "full",
        "checkpoint_every": 2,
        "number_checkpoints": 2,
        "cpu_checkpointing": True,
        "offload_activations": False,
    }
    lines = [line for line in data["lines"] if line["category"] == "activations" and line["phases"] == ["forward", "backward"]]
    assert [(line["location"], line["bytes"]) for line in lines] == [
        ("host.pinned", 2 * ONE_INPUT),
        ("gpu", 2 * FULL_LAYER),
    ]
    code, out, _ = run_main(capsys, "estimate", *model, *shape, "--checkpoint-every", "3")
    assert json.loads(out)["estimates"][0]["activation_checkpointing"]["number_checkpoints"] == 2
    bad = ["--checkpointing", "selective", "--checkpoint-every", "2"]
    code, _, err = run_main(capsys, "estimate", *model, *shape, *bad)
    assert code == 2 and "--checkpoint-every" in err
    code, _, err = run_main(capsys, "estimate", "--params", "1e6", "--number-checkpoints", "2")
    assert code == 2 and "--number-checkpoints" in err


def test_plan_tries_checkpointing_when_activations_do_not_fit():
    spec = from_preset("bert-large")
    training = Training(precision="fp16", seq_len=512, micro_batch=8, attention="eager")
    result = plan(spec, Cluster(8), Limits(6 * 2**30), training)
    assert result.fits, "only checkpointing brings BERT-large at micro-batch 8 under 6 GiB"
    assert all(c.estimate.training.checkpointing == "full" for c in result.fits)
    first = result.fits[0].estimate
    assert (first.zero.stage, first.zero.label()) == (1, "none/none")  # stage 0 checkpointed needs 6.79 GiB
    assert result.fits[0].as_dict()["activation_checkpointing"]["checkpointing"] == "full"
    assert "activation checkpointing none" in plan_text(result)  # the setup as given
    roomy = plan(spec, Cluster(8), Limits(80 * 2**30), training)
    assert all(c.estimate.training.checkpointing == "none" for c in roomy.fits + roomy.misses)


# The reference question: BERT-large (24 layers, hidden 1024, 16 heads) in fp16 on 8 GPUs, seq 512,
# micro-batch 8 (the batch docs/memory-model.md assumes for it).
BERT = from_preset("bert-large")
BERT_TRAINING = Training(precision="fp16", seq_len=512, micro_batch=8, attention="eager")


def test_bert_large_is_the_reference_shape():
    shape = BERT.shape
    assert shape is not None and (shape.num_layers, shape.hidden_size, shape.num_heads) == (24, 1024, 16)


def _lever_peaks(text: str) -> dict[str, str]:
    return dict(re.findall(r"^    ([a-zA-Z' -]+) \(.*?\): peak ([\d.]+) GiB", text, flags=re.M))


@pytest.mark.parametrize("stage", [0, 3])
def test_explain_names_activations_and_each_lever_is_the_estimators_own_number(stage):
    result = estimate(BERT, Cluster(8), BERT_TRAINING, ZeroSettings(stage=stage))
    text = dominates_text(result)
    category, amount, peak = dominant(result)
    assert category == "activations"
    assert f"activations make {gib(amount)} GiB of it ({round(100 * amount / peak)}%)" in text

    def peak_of(training: Training = BERT_TRAINING, zero: ZeroSettings = ZeroSettings(stage=stage)) -> str:
        return gib(estimate(BERT, Cluster(8), training, zero).peak("gpu")[1])

    expected = {
        "checkpoint every layer": peak_of(Training(precision="fp16", seq_len=512, micro_batch=8, attention="eager", checkpointing="full")),
        "halve the micro-batch": peak_of(Training(precision="fp16", seq_len=512, micro_batch=4, grad_accum=2, attention="eager")),
        "offload the optimizer": peak_of(zero=ZeroSettings(stage=max(stage, 1), offload_optimizer="cpu")),
        "checkpointed inputs in host memory": peak_of(
            Training(precision="fp16", seq_len=512, micro_batch=8, attention="eager", checkpointing="full", cpu_checkpointing=True)
        ),
        "the layers' saved activations in host memory": peak_of(
            Training(precision="fp16", seq_len=512, micro_batch=8, attention="eager", offload_activations=True)
        ),
    }
    if stage < 3:
        expected["next ZeRO stage"] = peak_of(zero=ZeroSettings(stage=stage + 1))
    else:
        assert "next ZeRO stage: not available, already stage 3" in text
    assert _lever_peaks(text) == expected
    assert {lever.name: gib(lever.peak) for lever in levers(result) if lever.peak is not None} == expected
    # Every lever lowers this peak; checkpointing lowers it most, as activations dominate.
    assert all(float(value) < float(gib(peak)) for value in expected.values())


def test_explain_gives_the_reference_questions_ratios(capsys):
    zero, three = (estimate(BERT, Cluster(8), BERT_TRAINING, ZeroSettings(stage=s)) for s in (0, 3))
    states = zero.total("gpu", "init") / three.total("gpu", "init")
    peaks = zero.peak("gpu")[1] / three.peak("gpu")[1]
    shrink = stage_shrink(three)
    assert (shrink.states_ratio, shrink.peak_ratio) == (states, peaks)
    # The issue: 8x on model states, about 1.5x on the peak, at a batch shape it does not give. Ours is 12x at
    # init: stage 3 keeps no 16-bit partition (gathers cast the fp32 master), so 4P/N against stage 0's 6P. At
    # the shape assumed here the peak falls 1.3x (1.47x before the activations counted the fp32 softmax, 9 B per
    # attention score, and the loss's fp32 copies): activations, which no stage partitions, weigh more of it.
    assert round(states) == 12 and 1.25 < peaks < 1.6
    args = ["--preset", "bert-large", "--gpus", "8", "--stage", "0,3", "--precision", "fp16", "--seq-len", "512",
            "--attention", "eager"]
    code, out, _ = run_main(capsys, "estimate", *args, "--micro-batch", "8", "--explain")
    assert code == 0
    assert f"model states fell {states:.1f}x" in out and f"the peak {peaks:.1f}x" in out
    assert "What dominates the peak (stage 3, offload none/none)" in out
    assert "no stage partitions activations" in out
