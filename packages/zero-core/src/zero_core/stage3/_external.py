"""`zero_core.zero.register_external_parameter`: a module declares a parameter it uses but does not own.

Stage 3 gathers such a parameter on the spot when an op reads it (see _hooks.py, `use`), but attribute reads
are not ops: `weight.shape`, `weight.data` or a kernel given `weight.data_ptr()` see the empty released tensor.
A registered parameter's unit is gathered with the module's own in its pre-forward hook and kept through its
forward and backward, as DeepSpeed does. The registry is DeepSpeed's attribute, `module._external_params`
({id(parameter): parameter}), so code written for DeepSpeed that reads it finds it.
"""
from __future__ import annotations

import torch
from zero_plugins import ZeroError

EXTERNAL_PARAMS_ATTRIBUTE = "_external_params"


def register_external_parameter(module: torch.nn.Module, parameter: torch.nn.Parameter) -> None:
    """Gather `parameter` whenever `module` runs (forward and backward), though another module owns it.

    Call it at any time, before or after `initialize`, on every rank (gathers are collectives).
    """
    if not isinstance(parameter, torch.nn.Parameter):
        raise ZeroError(f"register_external_parameter needs a torch.nn.Parameter (got {type(parameter).__name__}); "
                        "pass the module attribute itself, e.g. other.weight")
    registry: dict[int, torch.nn.Parameter] = vars(module).setdefault(EXTERNAL_PARAMS_ATTRIBUTE, {})
    registry[id(parameter)] = parameter


def external_parameters(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters registered on `module` with register_external_parameter."""
    registry: dict[int, torch.nn.Parameter] = vars(module).get(EXTERNAL_PARAMS_ATTRIBUTE, {})
    return list(registry.values())
