"""Stage 3 with memory_efficient_linear false under full checkpointing: which gathered weights autograd keeps.

The blocks' forward saves nothing under checkpointing, so only the LM head keeps its weight, at the loss; a
checkpoint of k blocks rebuilt in backward keeps k - 1 blocks' weights beside the running one (_held.py). The
dry run agrees (tests/zero_core/test_held_under_checkpointing_dry_run.py).
"""
from __future__ import annotations

from zero_plugins import Category
from zero_estimate import Cluster, LoraSpec, Training, ZeroSettings, estimate, from_preset

FOUR_GPUS = Cluster(gpus_per_node=4)
HEAD = 2048 * 50304  # pythia-1.4b's untied LM head (embed_out)


def _held_lines(training: Training, lora: LoraSpec | None = None) -> list[tuple[str, int, tuple[str, ...], str]]:
    """The lines of weights autograd keeps, each with the phases at whose peak instant it is held."""
    spec = from_preset("pythia-1.4b", lora=lora)
    found = estimate(spec, FOUR_GPUS, training, ZeroSettings(stage=3, memory_efficient_linear=False))
    return [(line.category.value, line.bytes, line.phases, line.instant) for line in found.lines
            if "autograd" in line.what and line.category in (Category.PARAM_GATHERED, Category.PARAM_GATHERED_HELD)]


def test_full_checkpointing_keeps_only_the_lm_heads_weight_at_the_loss() -> None:
    # backward peaks late (gradients, buckets, the working set), after the head's backward freed its weight
    assert _held_lines(Training(seq_len=1024, checkpointing="full")) == [
        ("param.gathered", 2 * HEAD, ("forward",), "loss")]


def test_a_lora_models_backward_peaks_at_its_start_with_the_heads_weight_held() -> None:
    # the head's input needs a gradient (the adapters below it train), so its weight is kept there too
    assert _held_lines(Training(seq_len=1024, checkpointing="full"), LoraSpec(16)) == [
        ("param.gathered", 2 * HEAD, ("forward",), "loss"),
        ("param.gathered.held", 2 * HEAD, ("backward",), "loss")]


def test_a_checkpoint_of_k_blocks_keeps_k_minus_1_blocks_weights_late_in_backward() -> None:
    # llama-2-7b on 32 GPUs: the gradient partition is small, and the rebuilt checkpoint makes backward's peak
    spec = from_preset("llama-2-7b")
    training = Training(seq_len=2048, checkpointing="full", checkpoint_every=4)
    found = estimate(spec, Cluster(gpus_per_node=8, nodes=4), training,
                     ZeroSettings(stage=3, memory_efficient_linear=False))
    block = 4 * 4096 * 4096 + 3 * 4096 * 11008  # q, k, v, o and the gated MLP's three
    held = [(line.bytes, line.phases, line.instant) for line in found.lines
            if line.category == Category.PARAM_GATHERED_HELD]
    assert held == [(2 * 3 * block, ("backward",), "late")]


def test_without_checkpointing_every_linear_weight_is_kept_through_backward() -> None:
    spec = from_preset("pythia-1.4b")
    lines = _held_lines(Training(seq_len=1024))
    assert [(category, size) for category, size, _, _ in lines] == [
        ("param.gathered", 2 * spec.linear_weight_params(above=100_000)),
        ("param.gathered.held", 2 * spec.linear_weight_params(above=100_000))]
    assert all(instant == "" for _, _, _, instant in lines)


def test_the_peak_no_longer_counts_every_layers_weights() -> None:
    spec = from_preset("pythia-1.4b")
    training = Training(seq_len=1024, checkpointing="full")
    off = estimate(spec, FOUR_GPUS, training, ZeroSettings(stage=3, memory_efficient_linear=False))
    on = estimate(spec, FOUR_GPUS, training, ZeroSettings(stage=3))
    # backward peaks late (gradients, buckets, the working set), after the head's backward freed its weight
    assert off.total("gpu", "backward") == on.total("gpu", "backward")
    assert off.total("gpu", "forward") == on.total("gpu", "forward") + 2 * HEAD
