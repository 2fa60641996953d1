"""Full-size presets by dry run: the engine's peak per rank beside zero-estimate's, stages 2 and 3.

    .venv/bin/python bench/dry_run_presets.py [--presets pythia-6.9b,llama-3-8b] [--nproc 8] [--seq-len 2048]

For each preset, `zero profile --dry-run` (the real engine on fake CUDA tensors under a fake process group of
NPROC ranks; docs/profile.md, "Dry runs") runs full fine-tuning with bf16 AdamW at stages 2 and 3, micro-batch
1, and the table gives rank 0's allocator peak (CUDA's 512-byte blocks; the phase where it falls), the
estimator's peak for the same settings, and the estimator's error against the dry run, which is the reference.
Also the wall time of each dry run (2 traced ranks, 2 settings, 2 steps each) and the peak resident memory of
the slowest. Progress goes to stderr; the markdown table to stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from zero_plugins.model_presets import causal_lm_presets

GIB = 1 << 30
DEFAULT = ("qwen2-1.5b,pythia-1.4b,llama-2-7b,pythia-6.9b,llama-3-8b,mistral-7b,qwen2-7b,opt-6.7b,llama-2-13b,"
           "opt-13b,pythia-12b,gpt-neox-20b")


def dry_run(preset: str, nproc: int, seq_len: int) -> tuple[dict[str, Any], float]:
    zero = Path(sys.executable).with_name("zero")
    started = time.monotonic()
    done = subprocess.run([str(zero), "profile", "--dry-run", "--model", preset, "--nproc", str(nproc), "--stages",
                           "2,3", "--micro-batch", "1", "--seq-len", str(seq_len), "--steps", "2", "--json"],
                          capture_output=True, text=True, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise SystemExit(f"{preset}: zero profile --dry-run failed:\n{done.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", default=DEFAULT)
    parser.add_argument("--nproc", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=2048)
    args = parser.parse_args()
    presets = args.presets.split(",")
    unknown = [name for name in presets if name not in causal_lm_presets()]
    if unknown:
        parser.error(f"--presets: {', '.join(unknown)} not among {', '.join(causal_lm_presets())}")
    print("| preset | stage | dry-run peak (GiB) | at | estimated peak (GiB) | estimator error | dry run (s) |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: |")
    for preset in presets:
        print(f"dry run: {preset} ...", file=sys.stderr, flush=True)
        report, seconds = dry_run(preset, args.nproc, args.seq_len)
        for setting in report["settings"]:
            peak = setting["peak"]
            print(f"| {preset} | {setting['setting']['stage']} | {peak['measured']['bytes'] / GIB:.2f} | "
                  f"{peak['measured']['phase']} | {peak['estimated']['bytes'] / GIB:.2f} | {peak['error']:+.1%} | "
                  f"{seconds:.0f} |", flush=True)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / (1 << 20)
    print(f"\n{args.nproc} ranks, micro-batch 1 x {args.seq_len} tokens, bf16 AdamW, full fine-tuning; the largest "
          f"dry run's resident memory: {rss:.2f} GiB")


if __name__ == "__main__":
    main()
