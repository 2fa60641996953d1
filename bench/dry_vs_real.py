"""The dry run against real runs, with SDPA, on model families no test uses (issue 31's acceptance).

    OMP_NUM_THREADS=1 .venv/bin/python bench/dry_vs_real.py [--families gemma,qwen3] [--modes full,lora]
        [--tolerance 0.02] [--json OUT]

For each family (a small config written to a temporary directory: hidden 256, 2-3 layers, vocabulary 4096-8192,
grouped or multi-query attention where the family has it) and each mode (full fine-tuning, LoRA rank 8), it runs
`zero profile --model CONFIG --nproc 2 --stages 2,3 --micro-batch 2 --seq-len 128 --steps 2 --attention sdpa
--json` twice: for real (2 gloo ranks, zero-pin's exact count of torch's CPU allocator) and with `--dry-run
--device cpu` (fake tensors in one process). Per setting and phase it prints rank 0's allocator peak of each,
(dry - real) / real and the attention kernel that ran (read from each run's autograd graph), and ends with
"PASS: every phase within 2%" or "FAIL: ..." (exit status 0 or 1). Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
PHASES = ("init", "forward", "backward", "step")
# Token ids inside the vocabulary: several families default to ids of their full-size tokenizer.
TOKENS = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
# None of these model_types is among the test suite's configs (llama, gpt2, qwen2, phi, t5, gpt_neox, opt,
# falcon, bert); each has something of its own in the layer that the dry run has to trace as it runs.
FAMILIES: dict[str, dict[str, Any]] = {
    # GeGLU MLP, embeddings scaled by sqrt(hidden) and tied, head_dim given apart from hidden / heads.
    "gemma": {"model_type": "gemma", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 768, "vocab_size": 8192,
              "max_position_embeddings": 1024},
    # LayerNorm, rotary on a quarter of each head, grouped keys and values.
    "stablelm": {"model_type": "stablelm", "hidden_size": 256, "num_hidden_layers": 3, "num_attention_heads": 8,
                 "num_key_value_heads": 2, "intermediate_size": 704, "vocab_size": 4096,
                 "max_position_embeddings": 1024, "partial_rotary_factor": 0.25},
    # Multi-query attention (one key/value head), learned positions, GELU MLP, biases everywhere, tied embeddings.
    "gpt_bigcode": {"model_type": "gpt_bigcode", "n_embd": 256, "n_layer": 3, "n_head": 8, "n_inner": 1024,
                    "vocab_size": 6144, "n_positions": 1024, "multi_query": True},
    # LayerNorm without weights (no parameters in the norms at all).
    "olmo": {"model_type": "olmo", "hidden_size": 256, "num_hidden_layers": 3, "num_attention_heads": 4,
             "num_key_value_heads": 4, "intermediate_size": 688, "vocab_size": 5120, "max_position_embeddings": 1024},
    # RMSNorm on each head's queries and keys, grouped keys and values.
    "qwen3": {"model_type": "qwen3", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 640, "vocab_size": 4096,
              "max_position_embeddings": 1024},
    # LayerNorm, biased projections, GELU MLP, grouped keys and values, tied embeddings, and a sliding window
    # shorter than the sequence, so SDPA is given an explicit mask.
    "starcoder2": {"model_type": "starcoder2", "hidden_size": 256, "num_hidden_layers": 3, "num_attention_heads": 8,
                   "num_key_value_heads": 2, "intermediate_size": 1024, "vocab_size": 4096,
                   "max_position_embeddings": 1024, "sliding_window": 64},
    # Llama's layer with Granite's multipliers: embedding, residual, attention and logits scaling.
    "granite": {"model_type": "granite", "hidden_size": 256, "num_hidden_layers": 3, "num_attention_heads": 8,
                "num_key_value_heads": 4, "intermediate_size": 704, "vocab_size": 4096,
                "max_position_embeddings": 1024, "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
                "attention_multiplier": 0.03, "logits_scaling": 8.0},
}
MODES = {"full": [], "lora": ["--lora-rank", "8"]}


def profile(config: Path, mode: str, dry: bool, timeout: float) -> dict[str, Any]:
    """`zero profile --json`'s report of one run; RuntimeError with the end of its stderr if it fails."""
    command = [str(Path(sys.executable).with_name("zero")), "profile", "--model", str(config), "--nproc", "2",
               "--stages", "2,3", "--micro-batch", "2", "--seq-len", "128", "--steps", "2", "--attention", "sdpa",
               "--json", "--timeout", str(int(timeout)), *MODES[mode]]
    if dry:
        command += ["--dry-run", "--device", "cpu"]
    # The subprocess's own timeout is a margin above --timeout: zero profile stops its ranks itself first.
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout + 60,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"exit status {done.returncode}: {done.stderr.strip()[-1500:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def kernel(setting: dict[str, Any]) -> str:
    """The attention kernel(s) that ran, named without the description after the colon."""
    return "; ".join(name.split(":")[0] for name in setting["attention"]["kernels"]) or "none"


def compare(family: str, mode: str, real: dict[str, Any], dry: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per setting and phase: rank 0's allocator peak, real and dry, and their difference."""
    rows = []
    for ran, traced in zip(real["settings"], dry["settings"], strict=True):
        if ran["label"] != traced["label"]:
            raise RuntimeError(f"settings differ: {ran['label']!r} (real) and {traced['label']!r} (dry)")
        for phase in PHASES:
            measured, predicted = ran["phases"][phase]["allocator"], traced["phases"][phase]["allocator"]
            row: dict[str, Any] = {"family": family, "mode": mode, "setting": ran["label"], "phase": phase,
                                   "kernel_real": kernel(ran), "kernel_dry": kernel(traced)}
            if measured is None or predicted is None:
                row.update(real=None, dry=None, difference=None,
                           absent=[ran["phases"][phase].get("absent"), traced["phases"][phase].get("absent")])
            else:
                row.update(real=measured["allocator"], dry=predicted["allocator"],
                           difference=(predicted["allocator"] - measured["allocator"]) / measured["allocator"])
            rows.append(row)
    return rows


def verdicts(rows: list[dict[str, Any]], tolerance: float) -> list[str]:
    """Every row the dry run does not stand for: beyond the tolerance, absent on one side only, another kernel."""
    failures = []
    for row in rows:
        where = f"{row['family']} {row['mode']} {row['setting']} {row['phase']}"
        if row["difference"] is None:
            if (row["absent"][0] is None) != (row["absent"][1] is None):
                failures.append(f"{where} (absent in one run only: {row['absent']})")
        elif abs(row["difference"]) > tolerance:
            failures.append(f"{where} ({100 * row['difference']:+.2f}%)")
        if row["kernel_real"] != row["kernel_dry"]:
            failures.append(f"{where} (kernel: {row['kernel_real']} real, {row['kernel_dry']} dry)")
    return failures


def print_table(rows: list[dict[str, Any]]) -> None:
    print("| family | mode | setting | phase | real (MiB) | dry (MiB) | dry - real (bytes) | difference | kernel |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |")
    for row in rows:
        same = row["kernel_real"] if row["kernel_real"] == row["kernel_dry"] else \
            f"{row['kernel_real']} (real) / {row['kernel_dry']} (dry)"
        if row["difference"] is None:
            print(f"| {row['family']} | {row['mode']} | {row['setting']} | {row['phase']} | - | - | - | "
                  f"absent | {same} |")
            continue
        print(f"| {row['family']} | {row['mode']} | {row['setting']} | {row['phase']} | {row['real'] / MiB:.3f} | "
              f"{row['dry'] / MiB:.3f} | {row['dry'] - row['real']:+,} | {100 * row['difference']:+.4f}% | {same} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--families", default=",".join(FAMILIES), help=f"comma list of {', '.join(FAMILIES)}")
    parser.add_argument("--modes", default=",".join(MODES), help="comma list of full, lora")
    parser.add_argument("--tolerance", type=float, default=0.02, help="largest |dry - real| / real per phase")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per zero profile run (default 900)")
    parser.add_argument("--json", type=Path, help="also write the rows (bytes, differences, kernels) here")
    args = parser.parse_args()
    families, modes = args.families.split(","), args.modes.split(",")
    for given, known, flag in ((families, FAMILIES, "--families"), (modes, MODES, "--modes")):
        unknown = [name for name in given if name not in known]
        if unknown:
            parser.error(f"{flag}: {', '.join(unknown)} not among {', '.join(known)}")
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, family in enumerate(families, 1):
            config = Path(tmp) / f"{family}.json"
            config.write_text(json.dumps({**FAMILIES[family], **TOKENS}), encoding="utf-8")
            for mode in modes:
                print(f"family {index} of {len(families)}: {family}, {mode} ({time.monotonic() - started:.0f} s)",
                      file=sys.stderr, flush=True)
                try:
                    real = profile(config, mode, dry=False, timeout=args.timeout)
                    dry = profile(config, mode, dry=True, timeout=args.timeout)
                    rows += compare(family, mode, real, dry)
                except (RuntimeError, subprocess.TimeoutExpired) as error:  # the other families still run
                    print(f"  {family} {mode} failed: {error}", file=sys.stderr, flush=True)
                    failures.append(f"{family} {mode} (did not run: {str(error).splitlines()[0]})")
    print_table(rows)
    failures = [*failures, *verdicts(rows, args.tolerance)]
    measured = [abs(row["difference"]) for row in rows if row["difference"] is not None]
    worst = max(measured, default=0.0)
    print(f"\n{len(measured)} phases, worst |difference| {100 * worst:.4f}%; {time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    if failures:
        print(f"FAIL: {len(failures)} phases beyond {100 * args.tolerance:g}%: " + "; ".join(failures))
        return 1
    print(f"PASS: every phase within {100 * args.tolerance:g}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
