"""zero against DeepSpeed and torch (DDP, ZeroRedundancyOptimizer): same model, data and config, one run.

    .venv/bin/python bench/engine_vs_peers.py

For each framework in turn it launches `torchrun --standalone --nproc_per_node 2` on this
file (DS_ACCELERATOR=cpu, OMP_NUM_THREADS=1, gloo), so every framework starts in fresh
processes and its RSS is its own; then it prints the comparison. Each rank trains a
scaled-down GPT-NeoX (transformers, random init) on the same tokens:
- zero: `zero_core.initialize` with the ds_config below;
- deepspeed: `deepspeed.initialize` with the same ds_config (0.19.8, torch's AdamW via
  `torch_adam`, so both step with the same kernel);
- ddp: torch DistributedDataParallel + AdamW, fp32 weights, bf16 autocast (plain-torch mixed precision);
- zero_redundancy: the same with torch's ZeroRedundancyOptimizer (optimizer state sharded, like stage 1).

Reported per rank:
- peak tensor bytes, counted exactly by a StorageTracker (every tensor storage made while
  building and during the first two steps, which include the optimizer-state allocation);
  for zero also its ledger's peak (engine buffers + activations), which must equal it;
- peak RSS (VmHWM) and its rise over the RSS after imports, before the model is built;
- mean step time over the timed steps, and its ratio to zero's.
zero's and DeepSpeed's losses (averaged over ranks) must agree step by step; the script exits
1 if they do not. Both start from the same 16-bit weights, because DeepSpeed casts the model
before taking its fp32 master (zero would otherwise take the master from the fp32 weights).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import torch
import torch.distributed.optim  # noqa: F401  (ZeroRedundancyOptimizer)

# the shared parts sit next to this file, on sys.path both when run directly and under torchrun
from _peers_measure import (LR, MiB, PerRank, Runner, Step, add_model_args, base_ds_config, make_model, measure,
                            print_ledger, print_table_head, torch_step, zero_and_deepspeed)
from _peers_run import add_run_args, main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stage", type=int, default=2, choices=[0, 1, 2])
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    add_model_args(parser)
    parser.add_argument("--bucket", type=int, default=2_000_000, help="reduce/allgather bucket size (elements)")
    parser.add_argument("--loss-rtol", type=float, default=None, help="default: 1e-5 for fp32, 1e-2 for bf16")
    add_run_args(parser, FRAMEWORKS)
    return parser.parse_args()


def ds_config(args: argparse.Namespace, world_size: int) -> dict[str, Any]:
    return {
        **base_ds_config(args, world_size, bf16=args.dtype == "bf16"),
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": args.stage, "reduce_bucket_size": args.bucket,
                              "allgather_bucket_size": args.bucket, "overlap_comm": False},
    }


def run_torch(args: argparse.Namespace, data: list[torch.Tensor], zero_redundancy: bool) -> dict[str, Any]:
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    def build() -> Step:
        model = DistributedDataParallel(make_model(args))
        if zero_redundancy:
            optimizer: torch.optim.Optimizer = ZeroRedundancyOptimizer(
                model.parameters(), optimizer_class=torch.optim.AdamW, lr=LR, weight_decay=0.0)
        else:
            optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
        return torch_step(model, optimizer, autocast=args.dtype == "bf16")

    return measure(build, data)


FRAMEWORKS: dict[str, Runner] = {
    **zero_and_deepspeed(ds_config),
    "ddp": lambda args, data: run_torch(args, data, zero_redundancy=False),
    "zero_redundancy": lambda args, data: run_torch(args, data, zero_redundancy=True),
}


def report(args: argparse.Namespace, per_rank: PerRank) -> int:
    names = list(per_rank[0])
    header = f"{'rank':>4}  {'framework':<16}{'peak tensors':>14}{'zero ledger':>13}{'peak RSS':>11}" \
             f"{'RSS rise':>11}{'step s':>9}{'time / zero':>13}"
    print_table_head(args, per_rank, f"{args.dtype}, stage {args.stage}", header)
    for rank, results in enumerate(per_rank):
        zero_time = results["zero"]["step_seconds"]
        for name in names:
            r = results[name]
            ledger = f"{r['ledger_peak_bytes'] / MiB:.1f} MiB" if "ledger_peak_bytes" in r else "-"
            print(f"{rank:>4}  {name:<16}{r['peak_tensor_bytes'] / MiB:>10.1f} MiB{ledger:>13}"
                  f"{r['peak_rss_bytes'] / MiB:>7.0f} MiB{r['rss_rise_bytes'] / MiB:>7.0f} MiB"
                  f"{r['step_seconds']:>9.3f}{r['step_seconds'] / zero_time:>13.2f}")
    exact = print_ledger(per_rank)
    rtol = args.loss_rtol if args.loss_rtol is not None else (1e-5 if args.dtype == "fp32" else 1e-2)
    ours, theirs = per_rank[0]["zero"]["losses"], per_rank[0]["deepspeed"]["losses"]
    worst = max(abs(a - b) / abs(b) for a, b in zip(ours, theirs))
    print("\nstep  zero loss     deepspeed loss")
    for step, (a, b) in enumerate(zip(ours, theirs)):
        print(f"{step:>4}  {a:<12.6f}  {b:.6f}")
    agree = worst <= rtol and exact
    print(f"zero vs DeepSpeed losses: worst relative difference {worst:.2e} "
          f"({'agree' if agree else 'DISAGREE'} within rtol {rtol:g})")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main(parse_args(), __file__, FRAMEWORKS, report, launcher_only=("loss_rtol",)))
