"""Optimizer state on NVMe beside CPU offload and no offload: peak tensor memory and step time, one run.

    .venv/bin/python bench/nvme_offload.py [--nvme-path DIR]

Each row runs in fresh `torchrun --standalone --nproc_per_node 2` processes (gloo,
OMP_NUM_THREADS=1) on the stage-3 bench's model and ds_config (stage3_vs_peers.py), bf16,
AdamW stepped by zero-offload's CPUAdam where the state is offloaded:
- none: stage 3, everything in device memory;
- cpu: `offload_optimizer: {device: cpu}`;
- nvme: `offload_optimizer: {device: nvme, nvme_path: DIR}`, `sub_group_size` and
  `buffer_count` set so that the step streams several sub-groups through 9 buffers
  (read-ahead and write-behind on).

Reported per rank: the peak of tensor bytes (a StorageTracker over the build and the first
two steps, independent of the ledger), zero's ledger peaks per location (device "cpu",
`host`, `host.pinned`, `nvme`), the mean time of the remaining steps. The acceptance check:
NVMe's peak must be lower than CPU offload's by at least 80% of the optimizer state's bytes
(Adam's two fp32 moments of this rank's partition, 8 B per element), and the losses of cpu
and nvme must be equal step by step. Exits 1 otherwise. On this CPU machine the device and
the host are one RAM, and the disk is whatever DIR is on: the times measure the CPU step and
the swap I/O, not PCIe.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any

from _peers_measure import MiB, PerRank, Runner, add_model_args, count_params, zero_and_deepspeed
from _peers_run import add_run_args, main
from stage3_vs_peers import ds_config as stage3_config

ROWS = ("none", "cpu", "nvme")
LOCATIONS = ("cpu", "host", "host.pinned", "nvme")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_args(parser)
    parser.set_defaults(hidden=512, steps=8)  # 21M params: the optimizer state is most of a rank's memory
    parser.add_argument("--nvme-path", default=str(Path(__file__).resolve().parents[1] / ".bench-nvme"),
                        help="swap directory (on a disk file system; default: .bench-nvme in the repository)")
    parser.add_argument("--persistence", type=int, default=10_000, help="stage3_param_persistence_threshold")
    parser.add_argument("--sub-group-size", type=int, default=1_000_000)
    parser.add_argument("--buffer-count", type=int, default=9)
    add_run_args(parser, ROWS)
    return parser.parse_args()


def config_for(row: str) -> Any:
    def make(args: argparse.Namespace, world_size: int) -> dict[str, Any]:
        config = stage3_config(args, world_size)
        del config["optimizer"]["params"]["torch_adam"]  # offload steps zero-offload's CPUAdam
        zero = config["zero_optimization"]
        zero["sub_group_size"] = args.sub_group_size
        if row == "cpu":
            zero["offload_optimizer"] = {"device": "cpu"}
        elif row == "nvme":
            zero["offload_optimizer"] = {"device": "nvme", "nvme_path": args.nvme_path,
                                         "buffer_count": args.buffer_count,
                                         "pipeline_read": True, "pipeline_write": True}
        return config
    return make


RUNNERS: dict[str, Runner] = {row: zero_and_deepspeed(config_for(row))["zero"] for row in ROWS}


def report(args: argparse.Namespace, per_rank: PerRank) -> int:
    partition = math.ceil(count_params(args) / args.ranks)
    state = 8 * partition  # Adam's exp_avg and exp_avg_sq, fp32
    print(f"\n{count_params(args) / 1e6:.1f}M params, {args.ranks} ranks, bf16, stage 3, sub_group_size "
          f"{args.sub_group_size}, nvme buffer_count {args.buffer_count}; nvme_path {args.nvme_path}")
    print(f"optimizer state per rank: {state / MiB:.1f} MiB (plus the fp32 master, {4 * partition / MiB:.1f} MiB)")
    head = f"{'rank':>4}  {'offload':<8}{'peak tensors':>14}" + "".join(f"{'ledger ' + w:>20}" for w in LOCATIONS)
    print(head + f"{'step s':>9}{'/ none':>8}")
    status = 0
    for rank, rows in enumerate(per_rank):
        for row in ROWS:
            r = rows[row]
            by_location = r["ledger_by_location"]
            ledger = "".join(f"{by_location.get(w, {}).get('total', 0) / MiB:>16.1f} MiB" for w in LOCATIONS)
            print(f"{rank:>4}  {row:<8}{r['peak_tensor_bytes'] / MiB:>10.1f} MiB{ledger}"
                  f"{r['step_seconds']:>9.3f}{r['step_seconds'] / rows['none']['step_seconds']:>8.2f}")
        drop = rows["cpu"]["peak_tensor_bytes"] - rows["nvme"]["peak_tensor_bytes"]
        share = drop / state
        same = rows["cpu"]["losses"] == rows["nvme"]["losses"]
        print(f"      nvme's peak is {drop / MiB:.1f} MiB below cpu's: {share:.0%} of the optimizer state "
              f"(acceptance: >= 80%); losses equal to cpu's step by step: {same}")
        if share < 0.8 or not same:
            status = 1
    print("\nlosses (rank 0):")
    for row in ROWS:
        print(f"  {row:<6}" + " ".join(f"{loss:.5f}" for loss in per_rank[0][row]["losses"]))
    return status


if __name__ == "__main__":
    arguments = parse_args()
    os.makedirs(arguments.nvme_path, exist_ok=True)
    sys.exit(main(arguments, __file__, RUNNERS, report,
                  ))
