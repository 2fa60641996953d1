"""zero stage 3 against torch FSDP2 (`fully_shard`) and DeepSpeed 0.19.8 stage 3: same model and data, one run.

    .venv/bin/python bench/stage3_vs_peers.py

For each framework in turn it launches `torchrun --standalone --nproc_per_node 2` on this
file (DS_ACCELERATOR=cpu, OMP_NUM_THREADS=1, gloo), so each starts in fresh processes. Each
rank trains a scaled-down GPT-NeoX (transformers, random init) in bf16 on the same tokens:
- zero: `zero_core.initialize` with the stage-3 ds_config below;
- deepspeed: `deepspeed.initialize` with the same ds_config (torch's AdamW via `torch_adam`);
- fsdp2: `fully_shard` on every transformer layer and on the root, over a CPU device mesh
  (gloo), `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16)`, torch AdamW on the
  fp32 sharded parameters, `clip_grad_norm_` 1.0 (FSDP2's own way to train in bf16).

Reported per rank: the peak of tensor bytes (a StorageTracker over the build and the first
two steps, which create the optimizer state), zero's ledger peak next to it, peak RSS, mean
step time over the remaining steps, and every figure as a ratio to zero's. zero's and
DeepSpeed's losses must agree step by step (bf16 tolerance), and FSDP2's must track them;
the script exits 1 otherwise.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

# the shared parts sit next to this file, on sys.path both when run directly and under torchrun
from _peers_measure import (MiB, PerRank, Runner, add_model_args, base_ds_config, print_ledger, print_table_head,
                            run_fsdp2, zero_and_deepspeed)
from _peers_run import add_run_args, main

FRAMEWORKS = ("zero", "deepspeed", "fsdp2")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_args(parser)
    parser.add_argument("--persistence", type=int, default=10_000, help="stage3_param_persistence_threshold")
    add_run_args(parser, FRAMEWORKS)
    return parser.parse_args()


def ds_config(args: argparse.Namespace, world_size: int) -> dict[str, Any]:
    return {
        **base_ds_config(args, world_size, bf16=True),
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": args.persistence,
                              "reduce_bucket_size": 2_000_000, "stage3_prefetch_bucket_size": 2_000_000},
    }


RUNNERS: dict[str, Runner] = {**zero_and_deepspeed(ds_config), "fsdp2": run_fsdp2}


def report(args: argparse.Namespace, per_rank: PerRank) -> int:
    header = (f"{'rank':>4}  {'framework':<11}{'peak tensors':>14}{'/ zero':>8}{'zero ledger':>13}{'peak RSS':>11}"
              f"{'/ zero':>8}{'step s':>9}{'/ zero':>8}")
    print_table_head(args, per_rank, f"bf16, stage 3 (persistence threshold {args.persistence})", header)
    for rank, results in enumerate(per_rank):
        ours = results["zero"]
        for name in FRAMEWORKS:
            r = results[name]
            ledger = f"{r['ledger_peak_bytes'] / MiB:.1f} MiB" if "ledger_peak_bytes" in r else "-"
            print(f"{rank:>4}  {name:<11}{r['peak_tensor_bytes'] / MiB:>10.1f} MiB"
                  f"{r['peak_tensor_bytes'] / ours['peak_tensor_bytes']:>8.2f}{ledger:>13}"
                  f"{r['peak_rss_bytes'] / MiB:>7.0f} MiB{r['peak_rss_bytes'] / ours['peak_rss_bytes']:>8.2f}"
                  f"{r['step_seconds']:>9.3f}{r['step_seconds'] / ours['step_seconds']:>8.2f}")
    exact = print_ledger(per_rank)
    losses = {name: per_rank[0][name]["losses"] for name in FRAMEWORKS}
    print("\nstep  " + "".join(f"{name + ' loss':<16}" for name in FRAMEWORKS))
    for step in range(args.steps):
        print(f"{step:>4}  " + "".join(f"{losses[name][step]:<16.6f}" for name in FRAMEWORKS))
    worst = {name: max(abs(a - b) / abs(b) for a, b in zip(losses[name], losses["zero"])) for name in FRAMEWORKS[1:]}
    agree = worst["deepspeed"] <= 1e-2 and worst["fsdp2"] <= 2e-2 and exact
    print("worst relative loss difference to zero: " + ", ".join(f"{n} {w:.2e}" for n, w in worst.items())
          + f" ({'agree' if agree else 'DISAGREE'}: DeepSpeed within 1e-2, FSDP2 within 2e-2)")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main(parse_args(), __file__, RUNNERS, report))
