"""How the *_vs_peers benches run: each framework in fresh torchrun processes, then one report over all of them."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from _peers_measure import PerRank, Runner, batches


def add_run_args(parser: argparse.ArgumentParser, frameworks: Collection[str]) -> None:
    """--ranks and --json, and the options the launcher passes its workers."""
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--worker", choices=list(frameworks), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)


def main(args: argparse.Namespace, script: str, runners: Mapping[str, Runner],
         report: Callable[[argparse.Namespace, PerRank], int], launcher_only: Collection[str] = ()) -> int:
    """Under torchrun (--worker): one framework on this rank. Otherwise launch each framework and report.

    `launcher_only`: options the workers do not take (they only change the report).
    """
    if args.worker:
        _worker(args, runners[args.worker])
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        by_framework = {name: _launch(args, script, name, Path(tmp) / f"{name}.json", launcher_only)
                        for name in runners}
    per_rank = [{name: by_framework[name][rank] for name in runners} for rank in range(args.ranks)]
    status = report(args, per_rank)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "per_rank": per_rank}, indent=1))
    return status


def _worker(args: argparse.Namespace, runner: Runner) -> None:
    """One framework on this rank (under torchrun); rank 0 writes every rank's results to --out."""
    dist.init_process_group("gloo")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.worker == "deepspeed":
        import deepspeed  # noqa: F401  (imported before the RSS baseline, like everything else)
    import transformers  # noqa: F401

    results = runner(args, batches(args, dist.get_rank()))
    per_rank: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, results)
    if dist.get_rank() == 0:
        Path(args.out).write_text(json.dumps(per_rank))
    dist.destroy_process_group()


def _launch(args: argparse.Namespace, script: str, framework: str, out: Path,
            launcher_only: Collection[str]) -> list[dict[str, Any]]:
    torchrun = Path(sys.executable).with_name("torchrun")
    options = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
               if v is not None and k not in ("worker", "out", "json", "ranks", *launcher_only)]
    command = [str(torchrun), "--standalone", f"--nproc_per_node={args.ranks}", script, f"--worker={framework}",
               f"--out={out}", *options]
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    print(f"running {framework}: {' '.join(command)}", flush=True)
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())
