"""The reported bug, reproduced and explained: "ZeRO stage 3 uses more memory than stage 2".

A DeepSpeed user fine-tuning Pythia-6.9b with LoRA saw stage 3 use 6.6 GB after
initialisation against stage 2's 16.6 GB, but 36.6 GB after the first forward against
32.4 GB (../shared/reference/issue-stage3-more-memory-than-stage2.txt), with
`memory_efficient_linear: false`. Here the same setting, scaled down: a GPT-NeoX
(transformers config, random init) with LoRA adapters on its attention and MLP linears,
base weights frozen, sequence length 256, bf16, 2 ranks. Memory is the ledger's total with
tracking on (engine buffers plus activations), after `initialize` and after the first forward.

The cause: the stock `F.linear` saves `weight.t()`, a view of the gathered weight, for the
gradient of its input. Releasing the parameter then frees nothing, so after forward every
base weight whose input carries a gradient is still in memory, now in 16-bit full size on
every rank, on top of the partitions: more than stage 2's one whole copy. The engine sees
it (`param.gathered.held` equals those weights' 16-bit size, and it warns once); the
memory-efficient linear saves the parameter instead and stage 3 stays below stage 2.
docs/cases/stage3-vs-stage2.md has the measured table (run this file as a script to print it).
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

if __name__ == "__main__":  # run as a script: put tests/ on sys.path, as pytest does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine_helpers import LoRALinear
from hf_models import gpt_neox

SEQ = 256
LORA_RANK = 8
TARGETS = ("query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h")
RUNS = {
    "stage 2": {"stage": 2},
    "stage 3, memory_efficient_linear: false": {"stage": 3, "memory_efficient_linear": False},
    "stage 3, memory_efficient_linear: true": {"stage": 3, "memory_efficient_linear": True},
}


def make_model() -> torch.nn.Module:
    model = gpt_neox(seed=0, vocab_size=512, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                     intermediate_size=1024, max_position_embeddings=SEQ)
    model.requires_grad_(False)  # the base is frozen; only the adapters train
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if name in TARGETS and isinstance(child, torch.nn.Linear):
                setattr(module, name, LoRALinear(child, LORA_RANK))
    return model


def ds_config(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": 1,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
        "zero_optimization": {
            "stage": run["stage"],
            "stage3_param_persistence_threshold": 10_000,  # DeepSpeed-Chat's setting in the report
            "memory_efficient_linear": run.get("memory_efficient_linear", True),
        },
    }


def _measure(rank: int, world_size: int) -> dict[str, dict[str, Any]]:
    import zero_core
    from zero_core.stage3 import unit_of

    ids = torch.randint(0, 512, (1, SEQ), generator=torch.Generator().manual_seed(rank))
    results = {}
    for label, run in RUNS.items():
        model = make_model()
        needs_grad: dict[torch.nn.Module, bool] = {}
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.register_forward_pre_hook(lambda m, args: needs_grad.__setitem__(m, args[0].requires_grad))
        engine, _, _, _ = zero_core.initialize(model=model, config=ds_config(run))
        engine.track_memory()
        after_init = engine.ledger.total()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loss = engine(input_ids=ids, labels=ids).loss
        report = engine.memory_report()["cpu"]
        # the weights F.linear saved a view of: partitioned (released) ones whose input needs a gradient
        saved = sum(2 * m.weight.ds_numel for m, needs in needs_grad.items() if needs and unit_of(m.weight))
        results[label] = {
            "after_init": after_init,
            "after_forward": engine.ledger.total(),
            "categories": {c: f["current"] for c, f in report.items() if f["current"]},
            "held": engine.ledger.current("param.gathered.held"),
            "held_units": sorted(name.removesuffix(" (frozen)") for name in engine.coordinator.held.held_units)
            if run["stage"] == 3 else [],
            "saved_modules": sorted(name for name, m in model.named_modules()
                                    if needs_grad.get(m) and unit_of(getattr(m, "weight", None)) is not None),
            "saved_linear_weights": saved,
            "warnings": [str(w.message) for w in caught if issubclass(w.category, zero_core.HeldParametersWarning)],
            "params": sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters()),
        }
        engine.backward(loss)  # the run must still train
        engine.step()
        del loss
        engine.destroy()
    return results


@pytest.fixture(scope="module")
def measured() -> list[dict[str, dict[str, Any]]]:
    from multirank import run_ranks

    return run_ranks(_measure, 2, timeout=400)


def test_stage3_is_below_stage2_after_initialize(measured) -> None:  # type: ignore[no-untyped-def]
    for result in measured:
        stage2 = result["stage 2"]["after_init"]
        for label in list(RUNS)[1:]:
            assert result[label]["after_init"] < stage2, label


def test_stock_linear_makes_stage3_exceed_stage2_after_forward(measured) -> None:  # type: ignore[no-untyped-def]
    for result in measured:
        held = result["stage 3, memory_efficient_linear: false"]
        assert held["after_forward"] > result["stage 2"]["after_forward"]
        assert held["held"] == held["saved_linear_weights"] > 0, "held = the 16-bit size of the saved linear weights"
        assert held["held_units"] == held["saved_modules"], "exactly the linears whose input needs a gradient"
        assert len(held["warnings"]) == 1 and "memory_efficient_linear: true" in held["warnings"][0]


def test_memory_efficient_linear_keeps_stage3_below_stage2(measured) -> None:  # type: ignore[no-untyped-def]
    for result in measured:
        efficient = result["stage 3, memory_efficient_linear: true"]
        assert efficient["after_forward"] < result["stage 2"]["after_forward"]
        assert efficient["held"] == 0 and efficient["warnings"] == []
        assert "param.gathered" not in efficient["categories"], "nothing gathered is left after forward"


def _table(result: dict[str, dict[str, Any]]) -> str:
    mib = 1024 * 1024
    rows = ["| run | after initialize | after first forward | param.gathered.held | held warning |",
            "| --- | ---: | ---: | ---: | --- |"]
    for label, figures in result.items():
        rows.append(f"| {label} | {figures['after_init'] / mib:.2f} MiB | {figures['after_forward'] / mib:.2f} MiB | "
                    f"{figures['held'] / mib:.2f} MiB | {'yes' if figures['warnings'] else 'no'} |")
    return "\n".join(rows)


if __name__ == "__main__":
    from multirank import run_ranks

    results = run_ranks(_measure, 2, timeout=400)
    print(f"model: {results[0]['stage 2']['params']} parameters; rank 0 of 2\n")
    print(_table(results[0]))
    for label, figures in results[0].items():
        print(f"\n{label}: " + ", ".join(f"{c} {v}" for c, v in figures["categories"].items()))
    print(f"\nsaved linear weights (16-bit): {results[0]['stage 3, memory_efficient_linear: false']['saved_linear_weights']} bytes")
