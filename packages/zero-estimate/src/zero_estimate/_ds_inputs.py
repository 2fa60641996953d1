"""Validation of the DeepSpeed-compatible functions' arguments.

DeepSpeed computes with whatever it is given (a float such as 2851e6 included) and fails
with a ZeroDivisionError on 0 GPUs. We keep its arithmetic on the given values, floats
included, and reject only what cannot describe a setup, naming the argument.
"""
from __future__ import annotations

from . import _checks
from ._errors import EstimateError


def hardware(num_gpus_per_node: object, num_nodes: object, additional_buffer_factor: object) -> None:
    _checks.count(num_gpus_per_node, "num_gpus_per_node")
    _checks.count(num_nodes, "num_nodes")
    _checks.positive_number(additional_buffer_factor, "additional_buffer_factor")


def params(total_params: object, largest_layer_params: object = None) -> None:
    total = _checks.positive_number(total_params, "total_params")
    if largest_layer_params is None:
        return
    largest = _checks.positive_number(largest_layer_params, "largest_layer_params", allow_zero=True)
    if largest > total:
        raise EstimateError(
            f"{largest_layer_params} is more than total_params ({total_params}); "
            "pass the parameter count of the largest single module",
            "largest_layer_params",
        )
