"""The same job run several times: every rank's allocator peak per phase, run after run.

    .venv/bin/python bench/same_bytes.py [--runs 3] [zero profile's arguments]

Without --model it runs `make run`'s job (`zero profile --model pythia-tiny --lora-rank 8 --ds-config
examples/profile_ds_config.json --stages 2,3 --memory-efficient-linear both --micro-batch 2 --seq-len 128
--steps 2`). Each run launches fresh ranks with `zero profile`'s own rank function, so the figures are the ones
`zero profile` measures (zero-pin's count of the CPU allocator), for every rank where the command prints rank 0's.
Prints one row per setting, rank and phase: each run's figure and the spread, (max - min) / max; exits 1 when a
spread exceeds 1% (docs/benchmarks.md, "Same bytes every run").
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

MiB = 1024 * 1024
MAKE_RUN = ["--model", "pythia-tiny", "--lora-rank", "8", "--ds-config", "examples/profile_ds_config.json",
            "--stages", "2,3", "--memory-efficient-linear", "both", "--micro-batch", "2", "--seq-len", "128",
            "--steps", "2"]
BOUND = 0.01


def main() -> int:
    from zero_core.launch import run_ranks
    from zero_core.profile import PHASES, add_profile_arguments
    from zero_core.profile._cli import request_from_args
    from zero_core.profile._ranks import profile_rank

    parser = argparse.ArgumentParser()
    add_profile_arguments(parser)
    parser.description = __doc__.split("\n", 1)[0]
    parser.add_argument("--runs", type=int, default=3, help="how many times to run the job (default 3)")
    given = sys.argv[1:]
    args = parser.parse_args(given if "--model" in given else [*MAKE_RUN, *given])  # no --model: make run's job
    request = request_from_args(args)
    runs: list[list[list[dict[str, Any]]]] = []
    for run in range(args.runs):
        started = time.monotonic()
        runs.append(run_ranks(profile_rank, request.nproc, request, timeout=request.timeout))
        print(f"run {run + 1}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    header = " ".join(f"{f'run {run + 1}':>12}" for run in range(args.runs))
    print(f"{'setting':<40} {'rank':>4} {'phase':<9} {header}   spread")
    worst = 0.0
    for index, setting in enumerate(request.settings):
        for rank in range(request.nproc):
            for phase in PHASES:
                figures = [per_rank[rank][index]["allocator"]["phases"][phase]["allocator"] for per_rank in runs]
                spread = (max(figures) - min(figures)) / max(figures)
                worst = max(worst, spread)
                cells = " ".join(f"{figure / MiB:>8.3f} MiB" for figure in figures)
                same = "same bytes" if len(set(figures)) == 1 else f"{100 * spread:.2f}%"
                print(f"{setting.label:<40} {rank:>4} {phase:<9} {cells}   {same}")
    print(f"\nworst spread {100 * worst:.2f}% over {args.runs} runs ({'within' if worst <= BOUND else 'ABOVE'} "
          f"the {100 * BOUND:.0f}% bound)")
    return 0 if worst <= BOUND else 1


if __name__ == "__main__":
    sys.exit(main())
