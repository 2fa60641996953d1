"""DeepSpeed-compatible ZeRO-2 model-state estimates (`deepspeed.runtime.zero.stage_1_and_2`).

Same names, signatures and numbers as DeepSpeed 0.19.8, so replacing the import prefix is
enough. The formulas are DeepSpeed's, including its `additional_buffer_factor`; our own
per-copy model is `zero_estimate.estimate`.
"""
from __future__ import annotations

from typing import Any

from . import _ds_inputs, _live
from ._ds_table import DsRow, millions, render

__all__ = [
    "estimate_zero2_model_states_mem_needs",
    "estimate_zero2_model_states_mem_needs_all_cold",
    "estimate_zero2_model_states_mem_needs_all_live",
    "model_to_params",
]


def estimate_zero2_model_states_mem_needs(
    total_params: float,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    additional_buffer_factor: float = 1.5,
) -> tuple[int, int]:
    """(CPU bytes per node, GPU bytes per GPU) for params, gradients and Adam state under ZeRO-2."""
    _ds_inputs.params(total_params)
    _ds_inputs.hardware(num_gpus_per_node, num_nodes, additional_buffer_factor)
    total_gpus = num_nodes * num_gpus_per_node
    # The operations and their order are DeepSpeed's, so float inputs round the same way.
    if cpu_offload:
        gpu_mem = 2 * total_params  # 16-bit params only; the rest lives on the host
        cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        # 2P for 16-bit params, then 18P/N: 16-bit and fp32 grads (2+4), fp32 master (4), Adam m and v (8).
        gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor  # fp32 model load per GPU
    return int(cpu_mem), int(gpu_mem)


def model_to_params(model: Any) -> int:
    """Total parameters of a live model, tied weights once (correct on meta and partitioned models)."""
    _live.require_module(model)
    return _live.total_params(model)


def estimate_zero2_model_states_mem_needs_all_live(
    model: Any, num_gpus_per_node: int = 1, num_nodes: int = 1, additional_buffer_factor: float = 1.5
) -> list[DsRow]:
    """Print DeepSpeed's ZeRO-2 table for a live `nn.Module` and return its rows."""
    return estimate_zero2_model_states_mem_needs_all_cold(
        total_params=model_to_params(model),
        num_gpus_per_node=num_gpus_per_node,
        num_nodes=num_nodes,
        additional_buffer_factor=additional_buffer_factor,
    )


def estimate_zero2_model_states_mem_needs_all_cold(
    total_params: float, num_gpus_per_node: int = 1, num_nodes: int = 1, additional_buffer_factor: float = 1.5
) -> list[DsRow]:
    """Print DeepSpeed's ZeRO-2 table for a parameter count and return its rows."""
    rows, text = zero2_table(total_params, num_gpus_per_node, num_nodes, additional_buffer_factor)
    print(text)
    return rows


def zero2_table(
    total_params: float, num_gpus_per_node: int, num_nodes: int, additional_buffer_factor: float
) -> tuple[list[DsRow], str]:
    """The rows and the text of the ZeRO-2 table, without printing (for `zero estimate --ds-compat`, which passes
    every argument: the defaults are DeepSpeed's functions')."""
    rows = []
    for cpu_offload in (True, False):
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            total_params, num_gpus_per_node, num_nodes, cpu_offload, additional_buffer_factor
        )
        rows.append(DsRow(cpu, gpu, offload_optimizer="cpu" if cpu_offload else "none"))
    software = f"Model with {millions(total_params)} total params."
    return rows, render(num_nodes, num_gpus_per_node, software, rows)
