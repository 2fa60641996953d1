"""zero-estimate calibrated against the allocator: `zero profile`'s measured phases beside the estimate.

    .venv/bin/python bench/calibration.py [--models pythia-tiny,llama-tiny,...] [--json FILE]

The grid of docs/memory-model.md, "Calibration against the allocator": the `zero profile` presets of six
decoder families, pythia-tiny, llama-tiny, gpt2-tiny, qwen2-tiny (GQA, tied embeddings), opt-tiny and
phi-tiny (hidden 256, 4 layers, vocab 8192, eager attention), full fine-tuning and LoRA rank 8, stages 0-3
and stage 3 with memory_efficient_linear false, plus stage 3 with offload_optimizer cpu and stage 3 with
Hugging Face's gradient checkpointing; examples/profile_ds_config.json (bf16, AdamW), 2 ranks (gloo on the
CPU accelerator), micro-batch 2, seq 128, 2 steps.

Prints one row per setting and phase: rank 0's allocator peak (the ruler: zero-pin's count of the CPU
allocator), the ledger's counted peak, the untracked share, the estimate over the same locations, and the
error (estimated - allocator) / allocator; then, per setting, the worst phase error, the worst untracked
share and whether the estimate peaks in the measured peak phase. tests/integration/test_estimate_calibration.py
asserts a smaller grid.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024
MODELS = ("pythia-tiny", "llama-tiny", "gpt2-tiny", "qwen2-tiny", "opt-tiny", "phi-tiny")
LORA = (None, 8)
PHASES = ("init", "forward", "backward", "step")


def settings() -> tuple[Any, ...]:
    from zero_core.profile import Setting

    return (*(Setting(stage) for stage in (0, 1, 2, 3)), Setting(3, memory_efficient_linear=False))


# Stage 3 with more levers: the optimizer offloaded to the CPU, and Hugging Face's gradient checkpointing.
VARIANTS = ("offload_optimizer cpu", "checkpointing")


def profile(model: str, lora: int | None, variant: str | None = None) -> dict[str, Any]:
    from zero_core.profile import ProfileRequest, Setting, run_profile
    from zero_core.profile._models import model_config

    ds_config = json.loads((ROOT / "examples" / "profile_ds_config.json").read_text(encoding="utf-8"))
    if variant == "offload_optimizer cpu":
        ds_config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    request = ProfileRequest(
        model_name=model, model_config=model_config(model), ds_config=ds_config,
        settings=settings() if variant is None else (Setting(3),), nproc=2, micro_batch=2, seq_len=128, steps=2,
        lora_rank=lora, gradient_checkpointing=variant == "checkpointing", timeout=900)
    return run_profile(request)


def rows(model: str, lora: int | None, report: dict[str, Any], variant: str | None = None) -> tuple[list[str], list[str]]:
    """The table's rows for one profile, and one summary line per setting."""
    table, summary = [], []
    for setting in report["settings"]:
        stage = _stage(setting["setting"]) + (" offload" if variant == "offload_optimizer cpu" else
                                               " ckpt" if variant == "checkpointing" else "")
        name = f"{model:<12} {'r8' if lora else 'full':<5} {stage:<14}"
        worst = 0.0
        untracked = 0.0
        for phase in PHASES:
            row = setting["phases"][phase]
            counted = row["allocator"]  # the ruler: the allocator's peak in the phase
            measured, estimated = counted["allocator"], row["estimated_at_allocator"]
            error = (estimated - measured) / measured
            worst = max(worst, abs(error))
            share = counted["untracked"] / measured
            untracked = max(untracked, abs(share))
            table.append(f"{name} {phase:<9} {measured / MiB:>9.2f} {counted['ledger'] / MiB:>9.2f} "
                         f"{100 * share:>+9.1f}% {estimated / MiB:>9.2f} {100 * error:>+7.1f}%")
        peak = setting["peak"]
        same = "yes" if peak["same_phase"] else f"no (estimate: {peak['estimated']['phase']})"
        summary.append(f"{name} worst {100 * worst:>4.1f}%  untracked {100 * untracked:>4.1f}%  peak {peak['measured']['phase']:<8} same phase: {same}")
    return table, summary


def _stage(setting: dict[str, Any]) -> str:
    return f"{setting['stage']}" + (" mel=F" if setting["memory_efficient_linear"] is False else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--json", type=Path, help="also write every profile's JSON report here")
    args = parser.parse_args()
    started = time.monotonic()
    table, summary, reports = [], [], {}
    for model in args.models.split(","):
        for lora in LORA:
            for variant in (None, *VARIANTS):
                report = profile(model, lora, variant)
                reports[f"{model}/{'r8' if lora else 'full'}/{variant or 'stages'}"] = report
                more_rows, more_summary = rows(model, lora, report, variant)
                table += more_rows
                summary += more_summary
    header = (f"{'model':<12} {'lora':<5} {'stage':<14} {'phase':<9} {'alloc MiB':>9} {'ledgr MiB':>9} "
              f"{'untracked':>10} {'est MiB':>9} {'error':>8}")
    print(header, *table, "", "per setting:", *summary, sep="\n")
    worst = max(float(line.split("worst")[1].split("%")[0]) for line in summary)
    wrong = [line for line in summary if "same phase: no" in line]
    print(f"\n{len(summary)} settings; worst phase error {worst:.1f}%; peak phase wrong in {len(wrong)}; "
          f"{time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
