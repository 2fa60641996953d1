"""The offload lines: per GPU's process, at the ledger's locations, laid out as the engine lays out its shards.

No torch here (these run in the torch-free tox envs): the model is a hand-written module list,
the same as tests/integration/test_estimate_offload_vs_ledger.py's live module, whose figures
the engine's ledger confirms there. By hand, with N = 2 ranks:

    module  trainable                 frozen
    "0"     weight 63x33, bias 63
    "2"     weight 31x63, bias 31
    "4"                               weight 17x31, bias 17

- stages 1-2, reduce_bucket_size 2500: the trainable params in reverse order (31, 1953, 63,
  2079) fill buckets of 2047 and 2079 elements: shards of 1024 and 1040 (each padded to N).
- stage 3, threshold 100: the biases (63, 31) are small and share one bucket of 94: a shard of
  47; the weights are units of 2079 and 1953: shards of 1040 and 977. The frozen weight (527)
  is a unit of its own: a 16-bit shard of 264; the frozen bias stays whole on the GPU.
"""
from __future__ import annotations

import json

import pytest
from zero_estimate import (
    Cluster,
    ModelSpec,
    ModuleParams,
    Training,
    ZeroSettings,
    estimate,
    from_numbers,
    from_preset,
)
from zero_estimate._formula import Q
from zero_estimate._partitions import optimizer_shards, pages, split_into_buckets

from cli_helpers import run_main

PAGE = 4096
N = 2
SPEC = ModelSpec.from_modules(
    "three linears",
    (
        ModuleParams("0", ((63, 33), (63,)), features=(33, 63)),
        ModuleParams("2", ((31, 63), (31,)), features=(63, 31)),
        ModuleParams("4", frozen=((17, 31), (17,)), features=(31, 17)),
    ),
)
SETTINGS = {"reduce_bucket_size": 2500, "stage3_param_persistence_threshold": 100}
STAGE_12_SHARDS = [1024, 1040]
STAGE_3_SHARDS = [47, 1040, 977]
STAGE_3_UNITS = [1040, 977, 264]


def _estimate(stage: int, spec: ModelSpec = SPEC, training: Training | None = None, **zero) -> object:
    settings = {**SETTINGS, "offload_optimizer": "cpu", **zero}
    return estimate(spec, Cluster(N), training or Training(), ZeroSettings(stage=stage, **settings))


def _host(result, where: str) -> dict[str, int]:
    return result.by_category(where, "step", per_rank=True)


@pytest.mark.parametrize(("stage", "shards"), [(1, STAGE_12_SHARDS), (2, STAGE_12_SHARDS), (3, STAGE_3_SHARDS)])
def test_optimizer_offload_keeps_master_and_state_pageable_and_pins_the_fp32_grads_in_pages(stage, shards):
    result = _estimate(stage)
    elements = sum(shards)
    # Adam's m and v, and CPUAdam's 4-byte step count for each master tensor (one per shard)
    assert _host(result, "host") == {"optim.master": 4 * elements, "optim.state": 8 * elements + 4 * len(shards)}
    # stage 1 reduces whole grads on the GPU and copies them into these at the step: optim.grad
    grads = "optim.grad" if stage == 1 else "grad.partition"
    assert _host(result, "host.pinned") == {grads: sum(pages(4 * shard, PAGE) for shard in shards)}
    assert not {"optim.master", "optim.state", "optim.grad"} & set(result.by_category("gpu", "step"))
    assert "grad.partition" not in result.by_category("gpu", "backward")


def test_pinned_buffers_are_rounded_to_pages_each_and_unpinned_ones_are_exact():
    pinned = _host(_estimate(3), "host.pinned")["grad.partition"]
    assert pinned == 4096 + 8192 + 4096  # 188, 4160 and 3908 bytes, each a buffer of its own
    unpinned = _estimate(3, pin_memory=False)
    assert _host(unpinned, "host.pinned") == {}
    assert _host(unpinned, "host")["grad.partition"] == 4 * sum(STAGE_3_SHARDS)


def test_param_offload_puts_every_units_16bit_shard_on_the_host_pinned():
    result = _estimate(3, offload_optimizer="none", offload_param="cpu")
    assert _host(result, "host.pinned") == {"param.partition": sum(pages(2 * u, PAGE) for u in STAGE_3_UNITS)}
    assert _host(result, "host") == {}  # the optimizer stays on the GPU
    assert "param.partition" not in result.by_category("gpu", "init")
    assert result.by_category("gpu", "init")["param.persistent"] == 2 * (63 + 31 + 17)  # the small params, whole
    both = _estimate(3, offload_param="cpu", pin_memory=False)
    assert _host(both, "host")["param.partition"] == 2 * sum(STAGE_3_UNITS)
    fp32 = _estimate(3, training=Training(precision="fp32"), offload_param="cpu")
    assert _host(fp32, "host.pinned")["param.partition"] == sum(pages(4 * u, PAGE) for u in STAGE_3_UNITS)


def test_our_pinned_volume_is_4_bytes_per_trainable_element_plus_2_per_partitioned_element_in_pages():
    # DeepSpeed pins 6 bytes per element (fp32 grads and 16-bit params) + 2 with accumulation; we pin 4 + 2,
    # and accumulating adds nothing: micro-batches add into the fp32 gradient buffers
    big = from_numbers(10_000_000, 1_000_000)  # bare counts: one buffer each, lower bounds
    for accumulation in (1, 8):
        result = estimate(big, Cluster(4), Training(grad_accum=accumulation),
                          ZeroSettings(stage=3, offload_optimizer="cpu", offload_param="cpu"))
        assert result.by_category("host.pinned", "step", per_rank=True) == {
            "grad.partition": pages(4 * 2_500_000, PAGE),
            "param.partition": pages(2 * 2_500_000, PAGE),
        }


def test_host_lines_are_per_process_and_host_totals_per_node():
    result = _estimate(2)
    per_rank = result.total("cpu", "step", per_rank=True)
    assert per_rank == 4 * 2064 + 8 * 2064 + 8 + pages(4 * 1024, PAGE) + pages(4 * 1040, PAGE)
    assert result.total("cpu", "step") == N * per_rank
    assert result.total("pinned", "step") == result.total("host.pinned", "step") == N * (4096 + 8192)
    assert result.total("cpu", "step") == result.total("host", "step") + result.total("host.pinned", "step")
    line = next(line for line in result.lines if line.category == "optim.master")
    assert (line.location, line.pinned, line.device, line.bytes) == ("host", False, "cpu", 4 * 2064)


def test_the_layout_follows_the_bucket_size_and_the_persistence_threshold():
    one_bucket = _host(_estimate(2, reduce_bucket_size=10_000), "host")["optim.master"]
    assert one_bucket == 4 * ((2079 + 63 + 1953 + 31) // 2)  # 4126: one bucket, no padding
    persistent = _host(_estimate(3, stage3_param_persistence_threshold=0), "host")["optim.master"]
    assert persistent == 4 * (1071 + 992)  # no small params: units of 2142 and 1984 elements


def test_zero_engines_bucket_cut():
    assert split_into_buckets([31, 1953, 63, 2079], 2500) == [2047, 2079]
    assert split_into_buckets([3000, 10, 10], 2500) == [3000, 20]  # a larger param alone
    assert split_into_buckets([], 5) == []


@pytest.mark.parametrize(
    ("stage", "trainable", "exact"),
    [(2, 400_000_000, True), (2, 600_000_000, False), (3, 400_000_000, False)],
)
def test_bare_counts_are_exact_for_one_bucket_and_a_stated_lower_bound_otherwise(stage, trainable, exact):
    spec = from_numbers(trainable, 1_000_000)
    shards = optimizer_shards(spec, ZeroSettings(stage=stage), 8, Q.var("T", trainable), Q.var("N", 8))
    assert (shards.exact, shards.count, shards.total.value) == (exact, 1, trainable // 8)
    result = estimate(spec, Cluster(8), Training(), ZeroSettings(stage=stage, offload_optimizer="cpu"))
    bound = [note for note in result.notes if "lower bounds" in note]
    assert bool(bound) is not exact
    master = next(line for line in result.lines if line.category == "optim.master")
    assert (master.formula, master.bytes) == ("4 * ceil(T/N)", 4 * trainable // 8)


def test_a_preset_is_laid_out_from_its_modules():
    result = estimate(from_preset("llama-2-7b"), Cluster(8), Training(), ZeroSettings(stage=2, offload_optimizer="cpu"))
    grads = next(line for line in result.lines if line.category == "grad.partition")
    assert grads.location == "host.pinned" and grads.formula == "sum pages(4 * Si)"
    assert not [note for note in result.notes if "lower bounds" in note]
    state = next(line for line in result.lines if line.category == "optim.state")
    assert state.formula == "8 * S + 4 * K" and state.numbers.endswith("+ 4 * 14")  # 14 reduce buckets


@pytest.mark.parametrize(("optimizer", "per_element", "per_tensor"), [("sgd-momentum", 4, 0), ("adafactor", 4, 4)])
def test_other_optimizers_state_on_the_host(optimizer, per_element, per_tensor):
    result = _estimate(2, training=Training(optimizer=optimizer))
    assert _host(result, "host")["optim.state"] == per_element * 2064 + per_tensor * 2
    assert "optim.state" not in _host(_estimate(2, training=Training(optimizer="sgd")), "host")


def test_json_lines_carry_location_and_pinned_flag(capsys):
    code, out, _ = run_main(capsys, "estimate", "--preset", "gpt2-xl", "--gpus", "2", "--stage", "2",
                            "--offload-optimizer", "cpu", "--json")
    lines = json.loads(out)["estimates"][0]["lines"]
    where = {(line["category"], line["location"], line["pinned"]) for line in lines if line["location"] != "gpu"}
    assert where == {("optim.master", "host", False), ("optim.state", "host", False),
                     ("grad.partition", "host.pinned", True), ("other", "host", False)}
    assert code == 0 and all("device" not in line for line in lines)


def test_the_plain_output_lists_the_host_lines_with_location_and_pinned_flag(capsys):
    code, out, _ = run_main(capsys, "estimate", "--preset", "gpt2-xl", "--gpus", "2", "--stage", "1,3",
                            "--offload-optimizer", "cpu", "--offload-param", "none")
    assert code == 0
    table = out.split("Bytes per GPU's process off the GPU")[1].split("\n\n")[0].splitlines()
    assert table[1].split() == ["location", "pinned", "category", "phases", "stage", "1", "cpu/none", "stage", "3",
                                "cpu/none"]
    rows = {tuple(row.split()[:3]) for row in table[3:]}
    assert rows == {("host", "no", "optim.master"), ("host", "no", "optim.state"), ("host", "no", "other"),
                    ("host.pinned", "yes", "grad.partition"), ("host.pinned", "yes", "optim.grad")}
