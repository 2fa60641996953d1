"""LoRA: freeze the base model and add trainable low-rank adapters to chosen linear layers.

As PEFT does: a target name matches a module's last name ("q_proj", "c_proj"), an adapted
layer of (in, out) features gains lora_A (rank x in) and lora_B (out x rank), and nothing
else trains. "all-linear" adapts every linear layer inside the transformer blocks.
"""
from __future__ import annotations

from dataclasses import replace

from . import _checks
from ._spec import LoraSpec, ModelSpec, ModuleParams

ALL_LINEAR = "all-linear"


def apply_lora(spec: ModelSpec, lora: LoraSpec) -> ModelSpec:
    """The model (listed module by module) with its params frozen and adapters on the targeted linear layers."""
    names = sorted({m.name for m in spec.modules if m.block and m.features is not None})
    wanted = set(lora.targets)
    if ALL_LINEAR not in wanted:
        for target in sorted(wanted - set(names)):
            _checks.unknown(target, "lora_targets", [*names, ALL_LINEAR], what="LoRA target")
    modules: list[ModuleParams] = []
    for m in spec.modules:
        modules.append(replace(m, trainable=(), frozen=m.trainable + m.frozen))
        if m.block and m.features is not None and (ALL_LINEAR in wanted or m.name in wanted):
            modules += _adapters(m.path, m.features, m.count, lora.rank)
    return ModelSpec.from_modules(spec.name, tuple(modules), spec.shape, lora)


def _adapters(path: str, features: tuple[int, int], count: int, rank: int) -> list[ModuleParams]:
    n_in, n_out = features
    return [
        ModuleParams(f"{path}.lora_A", ((rank, n_in),), count=count, features=(n_in, rank)),
        ModuleParams(f"{path}.lora_B", ((n_out, rank),), count=count, features=(rank, n_out)),
    ]
