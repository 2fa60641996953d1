"""Per-step latency of programs written for DeepSpeed: under `zero launch` against DeepSpeed 0.19.8, in one run.

    .venv/bin/python bench/programs_latency.py [--rounds 3] [--steps 10] [--programs NAME ...] [--json out.json]

Each program of bench/_latency_programs.py runs unchanged, on 2 CPU ranks (gloo, OMP_NUM_THREADS=1), twice per
round: under `python -m zero_cli launch --nproc_per_node 2` and under `torchrun --nproc_per_node 2` on the real
DeepSpeed (DS_ACCELERATOR=cpu), zero and DeepSpeed alternating so that both see the same load on the machine.
Each program times its own optimizer steps. Reported per program, over every round's steps after the first 2
(warm-up):
- step s: the median of the step's wall time (the slower rank's);
- host CPU s: the median of the step's process CPU time (user+sys of the rank's threads, averaged over ranks):
  the host-side cost, which other processes on the machine inflate far less than wall time;
- each as zero / DeepSpeed (target: at most 1.0).
Also the machine's 1-minute load average before and after.

The programs of bench/_latency_external.py, not part of this repository, run where their environment variable
names them (DeepSpeed-Chat's step-1 main.py: ZERO_DEEPSPEED_CHAT; transformers' run_clm.py: ZERO_RUN_CLM), with
the same rounds and warm-up; their step s is rank 0's wall time per step as the program prints it (that module
says how), and they have no host CPU figure. Where a variable is unset, its rows are listed as skipped.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _latency_external import EXTERNAL, launch_command
from _latency_programs import PROGRAMS

WARM_UP = 2
FRAMEWORKS = ("zero", "deepspeed")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", nargs="+", choices=[*PROGRAMS, *EXTERNAL],
                        help="default: every program, those of bench/_latency_external.py where their variable is set")
    parser.add_argument("--rounds", type=int, default=2, help="zero and DeepSpeed runs per program, alternating")
    parser.add_argument("--steps", type=int, default=10, help=f"steps per run (the first {WARM_UP} not counted)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--profile", help="a folder: each run's cProfile statistics of its counted steps, per rank "
                                          "(PROGRAM.FRAMEWORK.ROUND.RANK), to see where the time goes; programs "
                                          "of bench/_latency_programs.py only")
    args = parser.parse_args()
    if args.steps < WARM_UP + 2:  # run_clm's N steps give N - 1 intervals, the first WARM_UP not counted
        parser.error(f"--steps {args.steps}: at least {WARM_UP + 2}, so that a step is counted after the "
                     f"{WARM_UP} of warm-up")
    if args.profile:  # the programs write their statistics into it
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    if args.programs is None:
        args.programs = [*PROGRAMS, *(name for name, program in EXTERNAL.items() if program.found())]
    for name in args.programs:
        if name in EXTERNAL and not EXTERNAL[name].found():
            parser.error(f"--programs {name} needs its program: {EXTERNAL[name].how_to_get}")
    return args


def _run(framework: str, program: Path, options: list[str], folder: Path) -> list[dict[str, list[float]]]:
    """One run of `program` on 2 ranks; each rank's step times."""
    timing = folder / f"{framework}-timing"
    command, environment = launch_command(framework, [], [str(program)])
    done = subprocess.run([*command, *options, "--timing", str(timing)], env=environment, capture_output=True,
                          text=True, timeout=600)
    written = [Path(f"{timing}.{rank}") for rank in range(2)]
    if done.returncode != 0:
        if not all(path.exists() for path in written):
            raise SystemExit(f"{program.stem} on {framework} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
        # every step ran and was written; gloo's teardown at interpreter exit aborts a rank now and then
        print(f"note: {program.stem} on {framework} exited {done.returncode} after every rank wrote its steps; "
              "they are kept", flush=True)
    timings = [json.loads(path.read_text()) for path in written]
    for path in written:
        path.unlink()  # the next run's must not be mistaken for this one's
    return timings


def _steps(runs: list[list[dict[str, list[float]]]]) -> dict[str, float]:
    """Medians over every run's steps after warm-up: wall (the slower rank's) and CPU (the ranks' mean)."""
    wall, cpu = [], []
    for ranks in runs:
        for step in range(WARM_UP, min(len(r["wall"]) for r in ranks)):
            wall.append(max(r["wall"][step] for r in ranks))
            cpu.append(statistics.fmean(r["cpu"][step] for r in ranks))
    return {"step_s": statistics.median(wall), "host_cpu_s": statistics.median(cpu), "steps": len(wall)}


def _external_steps(runs: list[list[float]]) -> dict[str, Any]:
    """The median over every run's step times after warm-up; no CPU time (bench/_latency_external.py)."""
    wall = [seconds for run in runs for seconds in run[WARM_UP:]]
    return {"step_s": statistics.median(wall), "host_cpu_s": None, "steps": len(wall)}


def _measure_external(name: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    program = EXTERNAL[name]
    program.prepare(folder / "inputs")
    runs: dict[str, list[list[float]]] = {framework: [] for framework in FRAMEWORKS}
    for round_ in range(args.rounds):
        for framework in FRAMEWORKS:
            work = folder / f"{framework}-{round_}"
            work.mkdir()
            runs[framework].append(program.step_seconds(framework, args.steps, work))
    return {framework: _external_steps(runs[framework]) for framework in FRAMEWORKS}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"load_before": os.getloadavg()[0], "programs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.programs:
            folder = Path(tmp) / name
            folder.mkdir()
            if name in EXTERNAL:
                results["programs"][name] = _measure_external(name, args, folder)
                print(f"measured {name}", flush=True)
                continue
            text, options = PROGRAMS[name]
            program = folder / f"{name.replace('-', '_')}.py"
            program.write_text(text)
            runs: dict[str, list[Any]] = {framework: [] for framework in FRAMEWORKS}
            for round_ in range(args.rounds):
                for framework in FRAMEWORKS:
                    profile = ["--profile", str(Path(args.profile, f"{name}.{framework}.{round_}").resolve())
                               ] if args.profile else []
                    runs[framework].append(_run(framework, program, [*options, "--steps", str(args.steps), *profile],
                                                folder))
            results["programs"][name] = {framework: _steps(runs[framework]) for framework in FRAMEWORKS}
            print(f"measured {name}", flush=True)
    results["load_after"] = os.getloadavg()[0]
    return results


def report(results: dict[str, Any]) -> None:
    print(f"\nload average (1 min): {results['load_before']:.2f} before, {results['load_after']:.2f} after")
    header = (f"{'program':<28}{'zero step s':>12}{'DS step s':>11}{'zero/DS':>9}"
              f"{'zero host CPU s':>17}{'DS host CPU s':>15}{'zero/DS':>9}")
    print(header)
    print("-" * len(header))
    for name, by in results["programs"].items():
        zero, deepspeed = by["zero"], by["deepspeed"]
        cpu = (f"{zero['host_cpu_s']:>17.4f}{deepspeed['host_cpu_s']:>15.4f}"
               f"{zero['host_cpu_s'] / deepspeed['host_cpu_s']:>9.2f}") if zero["host_cpu_s"] is not None else (
            f"{'-':>17}{'-':>15}{'-':>9}")
        print(f"{name:<28}{zero['step_s']:>12.4f}{deepspeed['step_s']:>11.4f}"
              f"{zero['step_s'] / deepspeed['step_s']:>9.2f}{cpu}")
    for name, program in EXTERNAL.items():
        if name not in results["programs"] and not program.found():
            print(f"{name:<28}skipped: {program.how_to_get}")


def main() -> int:
    args = parse_args()
    results = measure(args)
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), **results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
