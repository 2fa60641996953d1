"""DeepSpeed's estimator, number for number and byte for byte, on the seed examples (no deepspeed needed)."""
from __future__ import annotations

import pytest
from zero_estimate import (
    DsRow,
    EstimateError,
    estimate_zero2_model_states_mem_needs,
    estimate_zero2_model_states_mem_needs_all_cold,
    estimate_zero3_model_states_mem_needs,
    estimate_zero3_model_states_mem_needs_all_cold,
)
from zero_estimate import stage3, stage_1_and_2

from estimate_golden import (
    DOCS_ZERO2_GPU_GB,
    GPUS_PER_NODE,
    LARGEST_LAYER_PARAMS,
    TOTAL_PARAMS,
    ZERO2_NEEDS,
    ZERO2_TABLE,
    ZERO3_NEEDS,
    ZERO3_TABLE,
    table_figures,
)

GIB = 2**30


def _gib(rows: list[DsRow]) -> list[tuple[str, str]]:
    return [(f"{r.cpu_bytes / GIB:.2f}", f"{r.gpu_bytes / GIB:.2f}") for r in rows]


def test_zero2_seed_table_is_printed_byte_for_byte(capsys):
    rows = estimate_zero2_model_states_mem_needs_all_cold(
        total_params=TOTAL_PARAMS, num_gpus_per_node=GPUS_PER_NODE, num_nodes=1
    )
    assert capsys.readouterr().out == ZERO2_TABLE
    assert _gib(rows) == table_figures(ZERO2_TABLE)
    assert [(r.cpu_bytes, r.gpu_bytes) for r in rows] == [ZERO2_NEEDS[True], ZERO2_NEEDS[False]]


def test_zero3_seed_table_is_printed_byte_for_byte(capsys):
    rows = estimate_zero3_model_states_mem_needs_all_cold(
        total_params=TOTAL_PARAMS, largest_layer_params=LARGEST_LAYER_PARAMS, num_gpus_per_node=GPUS_PER_NODE,
        num_nodes=1
    )
    assert capsys.readouterr().out == ZERO3_TABLE
    assert _gib(rows) == table_figures(ZERO3_TABLE)
    assert rows[0] == DsRow(*ZERO3_NEEDS[:2], "cpu", "cpu", True)


def test_stage2_without_offload_is_2p_plus_18p_over_n_not_the_docs_15_93gb():
    # DeepSpeed's docs print 15.93GB (4P + 16P/N); its code gives 2P + 18P/N = 11.28GB.
    needs = estimate_zero2_model_states_mem_needs(TOTAL_PARAMS, num_gpus_per_node=GPUS_PER_NODE, cpu_offload=False)
    assert needs == ZERO2_NEEDS[False]
    _, gpu = needs
    assert gpu == 2 * 2851_000_000 + 18 * 2851_000_000 // 8  # 16-bit params, then 18 bytes a param over 8 GPUs
    assert f"{gpu / GIB:.2f}" == "11.28" and f"{gpu / GIB:.2f}" != DOCS_ZERO2_GPU_GB


def test_zero3_returns_largest_layer_memory_as_deepspeed_does():
    needs = estimate_zero3_model_states_mem_needs(TOTAL_PARAMS, LARGEST_LAYER_PARAMS, num_gpus_per_node=GPUS_PER_NODE)
    assert needs == ZERO3_NEEDS


def test_plural_words_follow_the_counts(capsys):
    estimate_zero2_model_states_mem_needs_all_cold(1e9, num_gpus_per_node=1, num_nodes=2)
    assert "HW: Setup with 2 nodes, 1 GPU per node." in capsys.readouterr().out


def test_stage_modules_mirror_deepspeeds_import_paths():
    assert stage_1_and_2.estimate_zero2_model_states_mem_needs is estimate_zero2_model_states_mem_needs
    assert stage3.estimate_zero3_model_states_mem_needs is estimate_zero3_model_states_mem_needs


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: estimate_zero2_model_states_mem_needs(0), "total_params: must be greater than 0 (got 0)"),
        (lambda: estimate_zero2_model_states_mem_needs(1e9, num_gpus_per_node=0), "num_gpus_per_node: must be"),
        (lambda: estimate_zero2_model_states_mem_needs(1e9, num_nodes=-1), "num_nodes: must be at least 1"),
        (lambda: estimate_zero3_model_states_mem_needs(1e6, 2e6), "largest_layer_params: 2000000.0 is more than"),
        (lambda: estimate_zero3_model_states_mem_needs(1e6, 1, additional_buffer_factor=0), "additional_buffer_factor"),
    ],
)
def test_impossible_setups_are_rejected_with_the_argument_name(call, message):
    with pytest.raises(EstimateError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()
