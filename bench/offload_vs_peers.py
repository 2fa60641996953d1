"""CPU offload: zero against DeepSpeed 0.19.8 and FSDP2 (`CPUOffloadPolicy`), same model and data, one run.

    .venv/bin/python bench/offload_vs_peers.py

Each framework runs in fresh `torchrun --standalone --nproc_per_node 2` processes on this file
(DS_ACCELERATOR=cpu, OMP_NUM_THREADS=1, gloo), as in stage3_vs_peers.py, whose stage-3
ds_config this bench extends. Every rank trains a scaled-down GPT-NeoX (hidden 512 by default,
so that the optimizer state outweighs the activations) in bf16 on the same tokens:
- zero: `zero_core.initialize`, stage 3 with `offload_optimizer: {device: cpu}`; its optimizer
  is zero-offload's CPUAdam (what offload picks for AdamW);
- deepspeed: `deepspeed.initialize` with the same ds_config, stepping DeepSpeedCPUAdam, built
  (or loaded from the cache) by the launcher first; if it does not build, torch's AdamW
  (`torch_adam: true`), which the output says;
- zero+param, deepspeed+param: the same with `offload_param: {device: cpu}` too;
- fsdp2: `fully_shard` with `CPUOffloadPolicy` (parameters, gradients and AdamW's state on the
  host, torch's AdamW stepping there), `MixedPrecisionPolicy(bf16)`.

Reported per rank: the peak of tensor bytes (a StorageTracker over the build and the first two
steps), zero's ledger peaks at the device ("cpu") and at the host, peak RSS, the mean time of
the remaining steps, each as a ratio to zero with the same offload (FSDP2's to zero+param's, as
it offloads the parameters too); then the losses step by step. On a CPU machine the device and
the host are the same RAM: offload only moves bytes within it, so the times measure the CPU step
and the copies, not PCIe. The script exits 1 unless DeepSpeed's losses agree with zero's within
1e-2 and FSDP2's within 2e-2 at every step.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import torch

# the shared parts sit next to this file, on sys.path both when run directly and under torchrun
from _peers_measure import MiB, PerRank, Runner, add_model_args, print_table_head, run_fsdp2, zero_and_deepspeed
from _peers_run import add_run_args, main
from stage3_vs_peers import ds_config as stage3_config

OPTIMIZER = {"offload_optimizer": {"device": "cpu"}}
PARAMS = {"offload_param": {"device": "cpu"}}
# rows, and the zero row each is measured against: the one that offloads the same state
AGAINST = {"zero": "zero", "deepspeed": "zero", "zero+param": "zero+param", "deepspeed+param": "zero+param",
           "fsdp2": "zero+param"}
OFFLOADS = {"zero": "optimizer", "deepspeed": "optimizer", "zero+param": "optim+param",
            "deepspeed+param": "optim+param", "fsdp2": "CPUOffload"}
HOST = ("host", "host.pinned")  # the ledger's offload locations


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_args(parser)
    parser.set_defaults(hidden=512)  # 21M params: optimizer state (12 B/param) is most of a rank's memory
    parser.add_argument("--persistence", type=int, default=10_000, help="stage3_param_persistence_threshold")
    parser.add_argument("--deepspeed-adam", choices=["cpu_adam", "torch"], default="cpu_adam",
                        help="DeepSpeed's offloaded optimizer: DeepSpeedCPUAdam, or torch's AdamW (torch_adam)")
    add_run_args(parser, AGAINST)
    return parser.parse_args()


def offload_config(args: argparse.Namespace, world_size: int, params: bool, torch_adam: bool) -> dict[str, Any]:
    config = stage3_config(args, world_size)
    config["zero_optimization"].update({**OPTIMIZER, **(PARAMS if params else {})})
    if not torch_adam:  # without the switch, offload steps its CPU Adam (zero-offload's, or DeepSpeedCPUAdam)
        del config["optimizer"]["params"]["torch_adam"]
    return config


def offload_runners(params: bool) -> dict[str, Runner]:
    """zero (always its CPUAdam) and DeepSpeed (as --deepspeed-adam says), offloading the params too if asked."""
    suffix = "+param" if params else ""
    zero = zero_and_deepspeed(lambda args, ranks: offload_config(args, ranks, params, torch_adam=False))
    deepspeed = zero_and_deepspeed(
        lambda args, ranks: offload_config(args, ranks, params, torch_adam=args.deepspeed_adam == "torch"))
    return {f"zero{suffix}": zero["zero"], f"deepspeed{suffix}": deepspeed["deepspeed"]}


RUNNERS: dict[str, Runner] = {**offload_runners(False), **offload_runners(True),
                              "fsdp2": lambda args, data: run_fsdp2(args, data, offload=True)}


def prepare_deepspeed_adam(args: argparse.Namespace) -> None:
    """Build DeepSpeedCPUAdam here, once, so that no worker times or races the build; fall back if it fails."""
    if args.deepspeed_adam != "cpu_adam":
        return
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    print("DeepSpeedCPUAdam: building DeepSpeed's cpu_adam op, or loading it if built before "
          "(a first build takes about 100 s on 2 cores; ~/.cache/torch_extensions keeps it) ...", flush=True)
    started = time.perf_counter()
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        DeepSpeedCPUAdam([torch.zeros(16)])
    except Exception as error:  # noqa: BLE001 - any build failure means: use torch's AdamW, and say why
        print(f"DeepSpeedCPUAdam did not build ({type(error).__name__}: {error}); "
              "DeepSpeed steps torch's AdamW instead (torch_adam: true)")
        args.deepspeed_adam = "torch"
        return
    print(f"  ready in {time.perf_counter() - started:.1f} s")


def host_peak(ledger: dict[str, dict[str, int]]) -> int:
    return sum(ledger[where]["total"] for where in HOST if where in ledger)


def report(args: argparse.Namespace, per_rank: PerRank) -> int:
    header = (f"{'rank':>4}  {'framework':<16}{'offloads':<12}{'peak tensors':>14}{'/ zero':>7}{'ledger dev':>12}"
              f"{'ledger host':>13}{'peak RSS':>10}{'/ zero':>7}{'step s':>8}{'/ zero':>7}")
    print_table_head(args, per_rank, f"bf16, stage 3 (persistence threshold {args.persistence})", header)
    for rank, results in enumerate(per_rank):
        for name, r in results.items():
            ours = results[AGAINST[name]]
            ledger = r.get("ledger_by_location")
            device, host = (f"{ledger['cpu']['total'] / MiB:.1f} MiB", f"{host_peak(ledger) / MiB:.1f} MiB") \
                if ledger else ("-", "-")
            print(f"{rank:>4}  {name:<16}{OFFLOADS[name]:<12}{r['peak_tensor_bytes'] / MiB:>10.1f} MiB"
                  f"{r['peak_tensor_bytes'] / ours['peak_tensor_bytes']:>7.2f}{device:>12}{host:>13}"
                  f"{r['peak_rss_bytes'] / MiB:>6.0f} MiB{r['peak_rss_bytes'] / ours['peak_rss_bytes']:>7.2f}"
                  f"{r['step_seconds']:>8.3f}{r['step_seconds'] / ours['step_seconds']:>7.2f}")
    deepspeed_adam = "DeepSpeedCPUAdam" if args.deepspeed_adam == "cpu_adam" else "torch AdamW (torch_adam: true)"
    print(f"optimizers: zero CPUAdam, DeepSpeed {deepspeed_adam}, FSDP2 torch AdamW; "
          "/ zero: against zero with the same offload (FSDP2's: zero+param)")
    print_ledger_locations(per_rank[0])
    losses = {name: r["losses"] for name, r in per_rank[0].items()}
    print("\nstep  " + "".join(f"{name:<17}" for name in losses) + "(loss, mean over ranks)")
    for step in range(args.steps):
        print(f"{step:>4}  " + "".join(f"{values[step]:<17.6f}" for values in losses.values()))
    worst = {name: max(abs(a - b) / abs(b) for a, b in zip(losses[name], losses[AGAINST[name]]))
             for name in losses if name != AGAINST[name]}
    worst["zero+param"] = max(abs(a - b) / abs(b) for a, b in zip(losses["zero+param"], losses["zero"]))
    agree = all(value <= (2e-2 if name == "fsdp2" else 1e-2) for name, value in worst.items())
    print("worst relative loss difference (to the zero row it is measured against; zero+param to zero): "
          + ", ".join(f"{n} {w:.2e}" for n, w in worst.items())
          + f" ({'agree' if agree else 'DISAGREE'}: within 1e-2, FSDP2 within 2e-2)")
    return 0 if agree else 1


def print_ledger_locations(results: dict[str, dict[str, Any]]) -> None:
    """Rank 0's ledger peaks by category for each zero row, split by location: what offload moved off the device."""
    rows = {name: r["ledger_by_location"] for name, r in results.items() if "ledger_by_location" in r}
    columns = [(name, where) for name, ledger in rows.items() for where in ledger]
    print("\nzero ledger peaks by category and location (rank 0, MiB; tracked: build and first two steps):")
    print(f"  {'category':<20}" + "".join(f"{name + ' ' + where:>22}" for name, where in columns))
    seen = dict.fromkeys(c for ledger in rows.values() for where in ledger.values() for c in where)
    for category in [*(c for c in seen if c != "total"), "total"]:
        print(f"  {category:<20}" + "".join(f"{rows[name][where].get(category, 0) / MiB:>22.2f}"
                                            for name, where in columns))


if __name__ == "__main__":
    arguments = parse_args()
    if not arguments.worker:
        prepare_deepspeed_adam(arguments)
    sys.exit(main(arguments, __file__, RUNNERS, report))
