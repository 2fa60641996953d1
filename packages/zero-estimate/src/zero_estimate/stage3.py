"""DeepSpeed-compatible ZeRO-3 model-state estimates (`deepspeed.runtime.zero.stage3`).

Same names, signatures and numbers as DeepSpeed 0.19.8, so replacing the import prefix is
enough. Note that DeepSpeed's `gpus_factor` is 1/num_nodes: host memory is per node.
"""
from __future__ import annotations

from typing import Any

from . import _ds_inputs, _live
from ._ds_table import DsRow, millions, render

__all__ = [
    "estimate_zero3_model_states_mem_needs",
    "estimate_zero3_model_states_mem_needs_all_cold",
    "estimate_zero3_model_states_mem_needs_all_live",
    "model_to_params",
]


def estimate_zero3_model_states_mem_needs(
    total_params: float,
    largest_layer_params: float,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    cpu_offload_params: bool = True,
    zero_init: bool = True,
    additional_buffer_factor: float = 1.5,
) -> tuple[int, int, float]:
    """(CPU bytes per node, GPU bytes per GPU, largest-layer bytes) under ZeRO-3."""
    _ds_inputs.params(total_params, largest_layer_params)
    _ds_inputs.hardware(num_gpus_per_node, num_nodes, additional_buffer_factor)
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    # The largest layer gathered in 16 bits, plus its 16-bit gradients.
    largest_layer_memory = 4 * largest_layer_params
    # The operations and their order are DeepSpeed's, so float inputs round the same way.
    if cpu_offload:
        # Bytes per param on the hosts: fp32 master, grads, m and v (16), plus the 16-bit params (2)
        # when those are offloaded too; otherwise the 16-bit partition stays on the GPU.
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            host_bytes = 18
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            host_bytes = 16
        if zero_init:
            cpu_mem = total_params * host_bytes * gpus_factor * additional_buffer_factor
        else:
            cpu_mem = total_params * max(4 * num_gpus_per_node, host_bytes * gpus_factor) * additional_buffer_factor
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        # Model load in fp32 on each GPU's process: one layer at a time under zero.Init, all of it otherwise.
        if zero_init:
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem), largest_layer_memory


def model_to_params(model: Any) -> tuple[int, int]:
    """(total params, largest layer params) of a live model, right on meta and partitioned models."""
    _live.require_module(model)
    return _live.total_params(model), _live.largest_layer_params(model)


def estimate_zero3_model_states_mem_needs_all_live(
    model: Any, num_gpus_per_node: int = 1, num_nodes: int = 1, additional_buffer_factor: float = 1.5
) -> list[DsRow]:
    """Print DeepSpeed's ZeRO-3 table for a live `nn.Module` and return its rows."""
    total_params, largest_layer_params = model_to_params(model)
    return estimate_zero3_model_states_mem_needs_all_cold(
        total_params=total_params,
        largest_layer_params=largest_layer_params,
        num_gpus_per_node=num_gpus_per_node,
        num_nodes=num_nodes,
        additional_buffer_factor=additional_buffer_factor,
    )


def estimate_zero3_model_states_mem_needs_all_cold(
    total_params: float,
    largest_layer_params: float,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    additional_buffer_factor: float = 1.5,
) -> list[DsRow]:
    """Print DeepSpeed's ZeRO-3 table for parameter counts and return its rows."""
    rows, text = zero3_table(total_params, largest_layer_params, num_gpus_per_node, num_nodes, additional_buffer_factor)
    print(text)
    return rows


def zero3_table(
    total_params: float,
    largest_layer_params: float,
    num_gpus_per_node: int,
    num_nodes: int,
    additional_buffer_factor: float,
) -> tuple[list[DsRow], str]:
    """The rows and the text of the ZeRO-3 table, without printing (for `zero estimate --ds-compat`, which passes
    every argument: the defaults are DeepSpeed's functions')."""
    rows = []
    # DeepSpeed's row order; offloading params without offloading the optimizer is not a row.
    for cpu_offload, cpu_offload_params in ((True, True), (True, False), (False, False)):
        for zero_init in (True, False):
            cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
                total_params,
                largest_layer_params,
                num_gpus_per_node,
                num_nodes,
                cpu_offload,
                cpu_offload_params,
                zero_init,
                additional_buffer_factor,
            )
            rows.append(
                DsRow(
                    cpu,
                    gpu,
                    offload_optimizer="cpu" if cpu_offload else "none",
                    offload_param="cpu" if cpu_offload_params else "none",
                    zero_init=zero_init,
                )
            )
    software = (
        f"Model with {millions(total_params)} total params, {millions(largest_layer_params)} largest layer params."
    )
    return rows, render(num_nodes, num_gpus_per_node, software, rows)
