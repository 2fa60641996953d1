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

from estimate_golden import ZERO2_TABLE, ZERO3_TABLE

GIB = 2**30


def test_zero2_seed_table_is_printed_byte_for_byte(capsys):
    rows = estimate_zero2_model_states_mem_needs_all_cold(total_params=2851e6, num_gpus_per_node=8, num_nodes=1)
    assert capsys.readouterr().out == ZERO2_TABLE
    assert [(f"{r.cpu_bytes / GIB:.2f}", f"{r.gpu_bytes / GIB:.2f}") for r in rows] == [
        ("127.45", "5.31"),
        ("127.45", "11.28"),
    ]


def test_zero3_seed_table_is_printed_byte_for_byte(capsys):
    rows = estimate_zero3_model_states_mem_needs_all_cold(
        total_params=2851e6, largest_layer_params=32e6, num_gpus_per_node=8, num_nodes=1
    )
    assert capsys.readouterr().out == ZERO3_TABLE
    assert [(f"{r.cpu_bytes / GIB:.2f}", f"{r.gpu_bytes / GIB:.2f}") for r in rows] == [
        ("71.69", "0.12"),
        ("127.45", "0.12"),
        ("63.72", "0.78"),
        ("127.45", "0.78"),
        ("1.43", "6.09"),
        ("127.45", "6.09"),
    ]
    assert rows[0] == DsRow(76_977_000_000, 128_000_000, "cpu", "cpu", True)


def test_stage2_without_offload_is_2p_plus_18p_over_n_not_the_docs_15_93gb():
    # DeepSpeed's docs print 15.93GB (4P + 16P/N); its code gives 2P + 18P/N = 11.28GB.
    cpu, gpu = estimate_zero2_model_states_mem_needs(2851e6, num_gpus_per_node=8, cpu_offload=False)
    assert gpu == 2 * 2851_000_000 + 18 * 2851_000_000 // 8
    assert f"{gpu / GIB:.2f}" == "11.28"
    assert f"{(4 * 2851e6 + 16 * 2851e6 / 8) / GIB:.2f}" == "15.93"
    assert cpu == int(2851e6 * 4 * 8 * 1.5)


def test_zero3_returns_largest_layer_memory_as_deepspeed_does():
    cpu, gpu, largest = estimate_zero3_model_states_mem_needs(2851e6, 32e6, num_gpus_per_node=8)
    assert (cpu, gpu, largest) == (int(2851e6 * 18 * 1.5), 128_000_000, 128e6)


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
