"""The NVMe offload lines: swap files at `nvme`, the step counts and swap buffers in host memory.

No torch here (these run in the torch-free tox envs): the model is a hand-written module list,
the same as tests/integration/test_estimate_offload_vs_ledger.py's NVMe module, whose figures
the engine's ledger confirms there. Swap files and swap buffers take whole 4 KiB blocks
(O_DIRECT). By hand, with N = 2 ranks, bf16, Adam:

    module  trainable                 frozen
    "0"     weight 1201x5, bias 1201
    "2"     weight 3x1201, bias 3
    "4"                               weight 401x3, bias 401

T = 10,812 trainable elements: a partition of 5,406 per rank, so with sub_group_size 1500 the
swap buffers hold 1500 elements (6,000 bytes: 2 blocks, 8,192 bytes each).

- stages 1-2, reduce_bucket_size 8000: the trainable params in reverse order (3, 3603, 1201,
  6005) fill buckets of 4807 and 6005: shards of 2404 and 3003, cut into sub-groups of
  1500 + 904 and 1500 + 1500 + 3. Files: 3 x 8192 (6,000 B) + 4096 (3,616 B) + 4096 (12 B) =
  32,768 bytes of master, twice that of Adam's m and v, and 5 step counts (20 bytes).
- stage 3, threshold 1000: the small trainable bias (3) is a bucket of its own: a shard of 2;
  the units are 7206 ("0"), 3603 ("2") and 1203 (frozen "4"): shards of 3603, 1802 and 602.
  Optimizer sub-groups: 2 | 1500 + 1500 + 603 | 1500 + 302: 6 of them, 3 x 8192 + 3 x 4096 =
  36,864 bytes of master. The 16-bit unit shards, in module order: 3603, 1802, 602 elements;
  P - Pp = 12,416 - 404 = 12,012 partitioned elements, 6,006 per rank.
"""
from __future__ import annotations

import json

import pytest
from zero_estimate import (
    Cluster,
    Limits,
    ModelSpec,
    ModuleParams,
    Training,
    ZeroSettings,
    estimate,
    from_numbers,
    plan,
)
from zero_estimate._partitions import blocks, pages, split_at_max_in_cpu, unit_shards

from cli_helpers import run_main

N = 2
PAGE = 4096
SPEC = ModelSpec.from_modules(
    "three linears, odd sizes",
    (
        ModuleParams("0", ((1201, 5), (1201,)), features=(5, 1201)),
        ModuleParams("2", ((3, 1201), (3,)), features=(1201, 3)),
        ModuleParams("4", frozen=((401, 3), (401,)), features=(3, 401)),
    ),
)
SETTINGS = {"reduce_bucket_size": 8000, "stage3_param_persistence_threshold": 1000, "sub_group_size": 1500}
BLOCK = 4096
MIB = 2**20  # the default aio.block_size: NVMe swap slices are whole blocks of it


def _estimate(stage: int, training: Training | None = None, **zero) -> object:
    settings = {**SETTINGS, "offload_optimizer": "nvme", **zero}
    return estimate(SPEC, Cluster(N, page_size=PAGE), training or Training(), ZeroSettings(stage=stage, **settings))


def _at(result, where: str) -> dict[str, int]:
    return result.by_category(where, "step", per_rank=True)


def test_blocks_round_up_to_4_kib_and_leave_nothing_as_nothing():
    assert [blocks(n) for n in (0, 1, 4096, 4097, 6000)] == [0, 4096, 4096, 8192, 8192]


@pytest.mark.parametrize("stage", [1, 2])
def test_stage_1_and_2_cut_each_bucket_shard_into_sub_groups_each_a_file_in_whole_blocks(stage):
    result = _estimate(stage)
    master = 3 * 8192 + 4096 + 4096  # 1500, 1500, 1500, 904 and 3 elements of fp32
    assert _at(result, "nvme") == {"optim.master": master, "optim.state": 2 * master}  # Adam: m and v, a file each
    assert _at(result, "host") == {"optim.state": 5 * 4}  # a 4-byte step count per swap slice, not swapped
    # the fp32 grads stay in pinned host memory exactly as with `cpu`; the pool is one pinned allocation
    grads = "optim.grad" if stage == 1 else "grad.partition"
    assert _at(result, "host.pinned") == {grads: pages(4 * 2404, PAGE) + pages(4 * 3003, PAGE),
                                           "swap.buffer": 4 * 8192}
    assert not {"optim.master", "optim.state", "optim.grad"} & set(result.by_category("gpu", "step"))


def test_stage_3_cuts_the_small_param_bucket_and_every_trainable_unit_shard():
    result = _estimate(3)
    master = 4096 + 3 * 8192 + 4096 + 4096  # 2 | 1500, 1500, 603 | 1500, 302
    assert _at(result, "nvme") == {"optim.master": master, "optim.state": 2 * master}
    assert _at(result, "host") == {"optim.state": 6 * 4}
    grads = pages(4 * 2, PAGE) + pages(4 * 3603, PAGE) + pages(4 * 1802, PAGE)
    assert _at(result, "host.pinned") == {"grad.partition": grads, "swap.buffer": 4 * 8192}


def test_the_swap_buffer_is_pageable_and_a_block_larger_without_pinning():
    result = _estimate(2, pin_memory=False, optimizer_buffer_count=7)
    assert _at(result, "host.pinned") == {}
    host = _at(result, "host")
    assert host["swap.buffer"] == 7 * 8192 + BLOCK  # over-allocated by a block to start on one
    assert host["grad.partition"] == 4 * (2404 + 3003)  # as with `cpu`: pageable buffers are exact


def test_one_buffer_holds_the_whole_partition_when_it_is_smaller_than_a_sub_group():
    result = _estimate(2, sub_group_size=1_000_000_000)
    # no cut: one file per shard; each buffer holds the 5,406-element partition: 21,624 bytes, 6 blocks
    assert _at(result, "nvme")["optim.master"] == blocks(4 * 2404) + blocks(4 * 3003) == 12288 + 12288
    assert _at(result, "host") == {"optim.state": 2 * 4}
    assert _at(result, "host.pinned")["swap.buffer"] == 4 * 24576


@pytest.mark.parametrize(
    ("optimizer", "files", "step_counts"), [("sgd-momentum", 1, False), ("sgd", 0, False), ("adafactor", 1, True)]
)
def test_other_optimizers_swap_one_file_per_param_sized_state_tensor(optimizer, files, step_counts):
    result = _estimate(2, training=Training(optimizer=optimizer))
    master = 3 * 8192 + 4096 + 4096
    assert _at(result, "nvme") == {"optim.master": master, **({"optim.state": files * master} if files else {})}
    assert _at(result, "host").get("optim.state") == (5 * 4 if step_counts else None)


def test_too_few_optimizer_buffers_are_noted():
    assert not [note for note in _estimate(2, optimizer_buffer_count=3).notes if "buffer_count" in note]
    (note,) = [note for note in _estimate(2, optimizer_buffer_count=2).notes if "buffer_count" in note]
    assert "set it to at least 3" in note


def test_max_in_cpu_keeps_unit_shards_in_module_order_until_the_first_that_passes_it():
    assert unit_shards(SPEC, ZeroSettings(stage=3, **SETTINGS), N) == [3603, 1802, 602]
    # 3603 stays; 3603 + 1802 passes 5000, so 1802 goes, and 602 after it although it would still fit
    assert split_at_max_in_cpu([3603, 1802, 602], 5000) == ([3603], [1802, 602])
    assert split_at_max_in_cpu([3603, 1802, 602], 6007) == ([3603, 1802, 602], [])
    assert split_at_max_in_cpu([3603, 1802, 602], 3602) == ([], [3603, 1802, 602])


def test_param_nvme_puts_the_units_past_max_in_cpu_in_files_and_adds_the_param_buffers():
    result = _estimate(3, offload_optimizer="none", offload_param="nvme", param_max_in_cpu=5000,
                       param_buffer_count=5, param_buffer_size=2000)
    # the frozen unit counts too, and goes with the ones after the split
    assert _at(result, "nvme") == {"param.partition": blocks(2 * 1802) + blocks(2 * 602)}  # 4096 + 4096
    # the kept unit is pinned as with `cpu`; 5 buffers of min(2000, 6006) bf16 elements, 4,000 bytes: a block
    assert _at(result, "host.pinned") == {"param.partition": pages(2 * 3603, PAGE), "swap.buffer": 5 * 4096}
    assert _at(result, "host") == {}
    assert "param.partition" not in result.by_category("gpu", "step")
    assert not [note for note in result.notes if "buffer_size" in note]


def test_param_buffers_hold_the_per_rank_partition_when_buffer_size_is_larger():
    result = _estimate(3, offload_optimizer="none", offload_param="nvme", param_max_in_cpu=0)
    assert _at(result, "nvme") == {"param.partition": blocks(2 * 3603) + blocks(2 * 1802) + blocks(2 * 602)}
    # buffer_size 1e8 > 6,006: each of the 5 buffers is 12,012 bytes, 3 blocks
    assert _at(result, "host.pinned") == {"swap.buffer": 5 * 12288}


def test_no_param_buffers_while_every_unit_fits_in_max_in_cpu():
    result = _estimate(3, offload_optimizer="none", offload_param="nvme")  # max_in_cpu 1e9
    assert _at(result, "nvme") == {}
    assert _at(result, "host.pinned") == {"param.partition": sum(pages(2 * u, PAGE) for u in (3603, 1802, 602))}


def test_both_on_nvme_sum_two_swap_buffer_allocations_and_fp32_params_take_4_bytes():
    result = _estimate(3, offload_param="nvme", param_max_in_cpu=5000, param_buffer_size=2000, pin_memory=False,
                       training=Training(precision="fp32"))
    master = 4096 + 3 * 8192 + 4096 + 4096
    assert _at(result, "nvme") == {"optim.master": master, "optim.state": 2 * master,
                                   "param.partition": blocks(4 * 1802) + blocks(4 * 602)}  # 8192 + 4096
    host = _at(result, "host")
    # optimizer: 4 x 8192, param: 5 x blocks(4 * 2000) = 5 x 8192; each pageable and a block larger
    assert host["swap.buffer"] == (4 * 8192 + BLOCK) + (5 * 8192 + BLOCK)
    assert host["param.partition"] == 4 * 3603 and host["optim.state"] == 6 * 4
    assert len([line for line in result.lines if line.category == "swap.buffer"]) == 2


def test_a_param_buffer_below_the_largest_file_is_noted():
    result = _estimate(3, offload_param="nvme", param_max_in_cpu=0, param_buffer_size=3000)
    (note,) = [note for note in result.notes if "buffer_size" in note]
    assert "at least 3,603" in note


def test_bare_counts_take_one_shard_and_its_swap_slices_as_a_lower_bound():
    spec = from_numbers(10_000_001, 1_000_000)
    zero = ZeroSettings(stage=3, offload_optimizer="nvme", offload_param="nvme", sub_group_size=2_000_000,
                        param_max_in_cpu=1_000_000)
    result = estimate(spec, Cluster(4, page_size=PAGE), Training(), zero)
    # one shard of 2,500,001, cut into slices of one 1 MiB aio block (the budget, 3 x 2,500,001 / (16 x 4) =
    # 117,187 elements, is below one): 9 x 262,144 + 140,705
    master = 9 * MIB + blocks(4 * 140_705)
    assert _at(result, "nvme") == {"optim.master": master, "optim.state": 2 * master,
                                   "param.partition": blocks(2 * 2_500_001)}  # past max_in_cpu
    assert _at(result, "host") == {"optim.state": 10 * 4}
    assert _at(result, "host.pinned") == {"grad.partition": pages(4 * 2_500_001, PAGE),
                                          "swap.buffer": 4 * MIB + 5 * blocks(2 * 2_500_001)}
    assert [note for note in result.notes if "lower bounds" in note]


def test_the_default_sub_group_is_swapped_in_budget_slices_within_a_sixteenth_of_the_state():
    # 7B on 8 ranks at DeepSpeed's defaults: one sub-group of the whole 875M-element partition, once 4 buffers
    # of 3.5 GB; now 4 buffers of 156 blocks, 656 MB at most (1/16 of 12 B x 875M)
    spec = from_numbers(7_000_000_000, 7_000_000_000)
    zero = ZeroSettings(stage=3, offload_optimizer="nvme")
    result = estimate(spec, Cluster(8, page_size=PAGE), Training(), zero)
    pool = _at(result, "host.pinned")["swap.buffer"]
    assert pool == 4 * 156 * MIB <= 12 * 875_000_000 // 16
    line = next(line for line in result.lines if line.category == "swap.buffer")
    assert line.numbers == "4 * blocks(4 * min(1,000,000,000, ceil(7,000,000,000/8), 40,894,464))"


def test_the_budget_follows_aio_block_size_and_buffer_count():
    spec = from_numbers(7_000_000_000, 7_000_000_000)
    zero = ZeroSettings(stage=3, offload_optimizer="nvme", optimizer_buffer_count=9, aio_block_size=8 * MIB)
    pool = _at(estimate(spec, Cluster(8, page_size=PAGE), Training(), zero), "host.pinned")["swap.buffer"]
    assert pool == 9 * 8 * MIB * (3 * 875_000_000 // (16 * 9) // (2 * MIB))  # whole 8 MiB blocks: 8 of them


def test_adafactor_steps_whole_sub_groups_so_its_buffers_hold_one():
    spec = from_numbers(7_000_000_000, 7_000_000_000)
    zero = ZeroSettings(stage=3, offload_optimizer="nvme", sub_group_size=100_000_000)
    result = estimate(spec, Cluster(8, page_size=PAGE), Training(optimizer="adafactor"), zero)
    assert _at(result, "host.pinned")["swap.buffer"] == 4 * blocks(400_000_000)


def test_the_formulas_name_the_sub_groups_and_blocks():
    lines = {(line.category, line.location): line for line in _estimate(2).lines}
    master = lines["optim.master", "nvme"]
    assert master.formula == "sum blocks(4 * Gi)" and master.numbers == "3 x blocks(4 * 1,500) + 1 x blocks(4 * 904) + 1 x blocks(4 * 3)"
    assert lines["optim.state", "host"].formula == "4 * KG"
    assert lines["swap.buffer", "host.pinned"].formula == "nb * blocks(4 * min(SG, ceil(T/N), SL))"


def test_optimizer_nvme_is_estimated_at_stages_1_to_3(capsys):
    code, out, _ = run_main(capsys, "estimate", "--preset", "gpt2-xl", "--gpus", "2", "--offload-optimizer", "nvme",
                            "--json")
    assert code == 0
    assert [e["stage"] for e in json.loads(out)["estimates"]] == [1, 2, 3]


def test_the_host_table_lists_the_nvme_rows(capsys):
    code, out, _ = run_main(capsys, "estimate", "--preset", "gpt2-xl", "--gpus", "2", "--stage", "2,3",
                            "--offload-optimizer", "nvme", "--offload-param", "none", "--sub-group-size", "1e8")
    assert code == 0
    table = out.split("Bytes per GPU's process off the GPU")[1].split("\n\n")[0].splitlines()
    rows = {tuple(row.split()[:3]) for row in table[3:]}
    assert rows == {("host", "no", "optim.state"), ("host", "no", "other"), ("host.pinned", "yes", "grad.partition"),
                    ("host.pinned", "yes", "swap.buffer"), ("nvme", "no", "optim.master"),
                    ("nvme", "no", "optim.state")}
    assert table[-1].split()[0] == "nvme"  # after the host memory rows


def test_the_param_flags_reach_the_estimate(capsys):
    code, out, _ = run_main(capsys, "estimate", "--preset", "gpt2-xl", "--gpus", "2", "--offload-param", "nvme",
                            "--max-in-cpu", "0", "--param-buffer-count", "2", "--param-buffer-size", "1000",
                            "--optimizer-buffer-count", "9", "--offload-optimizer", "nvme", "--sub-group-size",
                            "1e6", "--json")
    assert code == 0
    (result,) = json.loads(out)["estimates"]
    buffers = [line for line in result["lines"] if line["category"] == "swap.buffer"]
    # a sub-group below the budget's slice (16M elements of gpt2-xl's 779M per rank, 9 buffers) is kept
    assert [line["bytes"] for line in buffers] == [2 * blocks(2 * 1000), 9 * blocks(4 * 1_000_000)]
    assert {line["location"] for line in result["lines"] if line["category"] == "param.partition"} == {"nvme"}


def test_explain_defines_the_nvme_symbols(capsys):
    code, out, _ = run_main(capsys, "estimate", "--preset", "gpt2-xl", "--stage", "3", "--offload-optimizer", "nvme",
                            "--offload-param", "nvme", "--max-in-cpu", "0", "--explain")
    assert code == 0
    legend = out.split("Symbols:")[1].split("\n\n")[0]
    for symbol in ("Gi", "KG", "Ui", "blocks", "nb", "bs", "SG", "SL"):
        assert f"\n  {symbol:<3} " in legend, symbol


def test_plan_tries_optimizer_nvme_at_stage_2_and_3():
    result = plan(from_numbers(1_000_000, 100_000), Cluster(4), Limits(80 * 2**30, nvme=2**30))
    configs = [(c.estimate.zero.stage, c.estimate.zero.label()) for c in result.fits]
    assert configs[-4:] == [(2, "nvme/none"), (3, "nvme/none"), (3, "nvme/cpu"), (3, "nvme/nvme")]
