"""`zero estimate --config` against the allocator, on configs that no test and no preset contains.

    .venv/bin/python bench/estimate_vs_allocator.py [--families gpt2,llama] [--json FILE]

Issue 20's acceptance: for six decoder families (GPT-2, GPT-NeoX, Llama, Qwen2 with grouped-query attention and
tied embeddings, OPT, Phi), one config each with other hidden sizes, layer counts, MLP widths and vocabularies
than the presets and tests use, full fine-tuning and LoRA rank 8, at stages 1-3: the estimate that
`zero estimate --config config.json --lora-rank 8 --ds-config ...` prints (run as a command, from the JSON
config alone) beside the allocator's per-phase peak that `zero profile` measures on 2 CPU ranks (zero-pin's
count of the CPU allocator), bf16, AdamW, micro-batch 2, seq 128, 2 steps. Prints each phase's error,
(estimate - allocator) / allocator, and whether the estimate peaks in the same phase.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024
PHASES = ("init", "forward", "backward", "step")
STAGES = (1, 2, 3)
# Shapes no preset (hidden 256, 4 layers, vocabulary 8192) and no test uses.
UNSEEN: dict[str, dict[str, Any]] = {
    "gpt2": {"model_type": "gpt2", "n_embd": 320, "n_layer": 3, "n_head": 5, "vocab_size": 6000, "n_positions": 512},
    "gpt_neox": {"model_type": "gpt_neox", "hidden_size": 384, "num_hidden_layers": 3, "num_attention_heads": 6,
                 "intermediate_size": 1536, "vocab_size": 5000, "max_position_embeddings": 512},
    "llama": {"model_type": "llama", "hidden_size": 320, "num_hidden_layers": 3, "num_attention_heads": 5,
              "num_key_value_heads": 5, "intermediate_size": 864, "vocab_size": 7000, "max_position_embeddings": 512},
    "qwen2": {"model_type": "qwen2", "hidden_size": 320, "num_hidden_layers": 3, "num_attention_heads": 10,
              "num_key_value_heads": 2, "intermediate_size": 864, "vocab_size": 5000, "max_position_embeddings": 512,
              "tie_word_embeddings": True},
    "opt": {"model_type": "opt", "hidden_size": 320, "num_hidden_layers": 3, "num_attention_heads": 5, "ffn_dim": 1280,
            "vocab_size": 6000, "word_embed_proj_dim": 320, "max_position_embeddings": 512},
    "phi": {"model_type": "phi", "hidden_size": 320, "num_hidden_layers": 3, "num_attention_heads": 5,
            "intermediate_size": 1280, "vocab_size": 6000, "max_position_embeddings": 512},
}
DS_CONFIG = ROOT / "examples" / "profile_ds_config.json"


def measured(family: str, lora: int | None) -> dict[str, Any]:
    """`zero profile`'s report of the unseen config at stages 1-3."""
    from zero_core.profile import ProfileRequest, Setting, run_profile

    request = ProfileRequest(
        model_name=family, model_config=UNSEEN[family], ds_config=json.loads(DS_CONFIG.read_text(encoding="utf-8")),
        settings=tuple(Setting(stage) for stage in STAGES), nproc=2, micro_batch=2, seq_len=128, steps=2,
        lora_rank=lora, timeout=900)
    return run_profile(request)


def estimated(config_path: Path, lora: int | None) -> dict[int, dict[str, Any]]:
    """`zero estimate --json` from the config file, per stage (torch's single-tensor step, as on a CPU device)."""
    command = [str(Path(sys.executable).parent / "zero"), "estimate", "--json", "--config", str(config_path),
               "--ds-config", str(DS_CONFIG), "--gpus", "2", "--micro-batch", "2", "--seq-len", "128",
               "--optimizer-impl", "single-tensor", "--stage", ",".join(map(str, STAGES))]
    if lora is not None:
        command += ["--lora-rank", str(lora)]
    report = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    return {entry["stage"]: entry for entry in report["estimates"]}


def phase_total(estimate: dict[str, Any], phase: str, locations: list[str], device: str) -> int:
    """The estimate over the locations the allocator counts, as `zero profile` sums it (not the model's build)."""
    wanted = {"gpu" if where == device else where for where in locations} or {"gpu"}
    return sum(int(line["bytes"]) for line in estimate["lines"]
               if line["location"] in wanted and phase in line["phases"] and line["instant"] != "build")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--families", default=",".join(UNSEEN))
    parser.add_argument("--json", type=Path, help="also write the measured and estimated figures here")
    args = parser.parse_args()
    started = time.monotonic()
    rows, summary, dump = [], [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families.split(","):
            config_path = Path(tmp) / f"{family}.json"
            config_path.write_text(json.dumps(UNSEEN[family]), encoding="utf-8")
            for lora in (None, 8):
                report, estimates = measured(family, lora), estimated(config_path, lora)
                for setting in report["settings"]:
                    stage = setting["setting"]["stage"]
                    allocator = setting["allocator"]
                    worst, totals = 0.0, {}
                    for phase in PHASES:
                        ruler = setting["phases"][phase]["allocator"]["allocator"]
                        guess = phase_total(estimates[stage], phase, allocator["locations"], setting["device"])
                        error = (guess - ruler) / ruler
                        worst, totals[phase] = max(worst, abs(error)), (ruler, guess)
                        rows.append(f"{family:<9} {'r8' if lora else 'full':<5} {stage:<6} {phase:<9} "
                                    f"{ruler / MiB:>9.2f} {guess / MiB:>9.2f} {100 * error:>+7.1f}%")
                    peak_measured = max(PHASES, key=lambda p: totals[p][0])
                    peak_estimated = max(PHASES, key=lambda p: totals[p][1])
                    same = "yes" if peak_measured == peak_estimated else f"no (estimate: {peak_estimated})"
                    summary.append(f"{family:<9} {'r8' if lora else 'full':<5} stage {stage}  worst {100 * worst:>4.1f}%"
                                   f"  peak {peak_measured:<8} same phase: {same}")
                    dump[f"{family}/{'r8' if lora else 'full'}/{stage}"] = totals
    print(f"{'family':<9} {'lora':<5} {'stage':<6} {'phase':<9} {'alloc MiB':>9} {'est MiB':>9} {'error':>8}",
          *rows, "", "per setting:", *summary, sep="\n")
    worst = max(float(line.split("worst")[1].split("%")[0]) for line in summary)
    wrong = sum("same phase: no" in line for line in summary)
    print(f"\n{len(summary)} settings; worst phase error {worst:.1f}%; peak phase wrong in {wrong}; "
          f"{time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(dump, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
