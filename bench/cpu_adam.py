"""zero's CPU optimizers against DeepSpeed's and torch's, on the same tensors, as a share of memory bandwidth.

An optimizer step over N fp32 params is memory-bound: Adam reads param, grad, exp_avg and
exp_avg_sq and writes param, exp_avg and exp_avg_sq (7 x 4 bytes per param); Adagrad and Lion
read 3 and write 2 tensors (5 x 4 bytes). With --param-dtype bf16 the param and grad take
2 bytes and the states stay fp32 (fp32_optimizer_states; torch's optimizers are left out, as
they keep bf16 states). The bench measures the machine's bandwidth in the same run, between
the steps (an in-place add_ of 1 GiB tensors: bytes read + written per second, best of all
rounds), and prints each optimizer's step time, params/s, the bytes it must move per second,
and that as a share of the bandwidth. Each optimizer runs on one tensor of --numel params and
on the same params cut into --sub-groups chunks (what the engine hands over). Timings are best
of --repeat steps after one warm-up step, taken round-robin (each first in turn) across
optimizers so that background load hits all of them alike.

DeepSpeed's CPU ops are built on first use (about 100 s each on an idle 2-core machine, cached
in ~/.cache/torch_extensions); they are skipped, with a message, if deepspeed is not installed
or a build fails. Threads: set OMP_NUM_THREADS, which both torch and DeepSpeed's ops follow.

Usage: OMP_NUM_THREADS=2 python bench/cpu_adam.py [--numel 33554432] [--sub-groups 8] [--repeat 5]
       [--optimizers adam,adagrad,lion] [--no-deepspeed] [--param-dtype fp32|bf16]
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

import zero_offload
from zero_plugins import format_table

# Bytes a step must move per param: the param is read and written and the grad read (3 x the
# param's size), and each fp32 state is read and written (Adam 2, Adagrad and Lion 1 state).
STATE_BYTES_PER_PARAM = {"adam": 2 * 2 * 4, "adagrad": 2 * 4, "lion": 2 * 4}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
DEEPSPEED_CLASS = {"adam": "DeepSpeedCPUAdam", "adagrad": "DeepSpeedCPUAdagrad", "lion": "DeepSpeedCPULion"}
HYPER = {  # one set per family, given to every implementation
    "adam": dict(lr=1e-3, weight_decay=0.01),
    "adagrad": dict(lr=1e-2, weight_decay=0.01),
    "lion": dict(lr=1e-4, betas=(0.9, 0.99), weight_decay=0.01),
}

MakeOptimizer = Callable[[list[torch.Tensor]], Any]


@dataclass
class Case:
    name: str
    make: MakeOptimizer


class Bandwidth:
    """Bytes moved per second by `a.add_(b)` over two 1 GiB tensors (2 GiB read, 1 GiB written), best so far.

    In place, as the optimizers write: a copy_ into another buffer also reads the target's
    cache lines before writing them, which counting read + written bytes would miss. It is
    measured between the optimizer steps, in the same rounds, so that load from other
    processes on the machine lowers it as much as it slows the steps.
    """

    def __init__(self) -> None:
        # Written, not zeros: untouched pages would all read the kernel's one zero page, from cache.
        self.target = torch.ones(1 << 28)
        self.source = torch.full((1 << 28,), 1e-30)
        self.best_seconds = float("inf")

    def measure(self) -> None:
        started = time.perf_counter()
        self.target.add_(self.source)
        self.best_seconds = min(self.best_seconds, time.perf_counter() - started)

    def bytes_per_second(self) -> float:
        return 3 * self.target.numel() * self.target.element_size() / self.best_seconds


def deepspeed_cases(family: str) -> list[Case]:
    """DeepSpeed's CPU optimizer for `family`, built now so that its build is not timed."""
    try:
        import deepspeed.ops.adagrad
        import deepspeed.ops.adam
        import deepspeed.ops.lion
    except ImportError as error:
        print(f"skipping DeepSpeed: deepspeed is not installed ({error})")
        return []
    module = {"adam": deepspeed.ops.adam, "adagrad": deepspeed.ops.adagrad, "lion": deepspeed.ops.lion}[family]
    cls = getattr(module, DEEPSPEED_CLASS[family])
    print(f"{DEEPSPEED_CLASS[family]}: building DeepSpeed's cpu_{family} op, or loading it if built before "
          "(a build takes about 100 s on an idle 2-core machine) ...", flush=True)
    started = time.perf_counter()
    try:
        cls([torch.zeros(16)], **HYPER[family])
    except Exception as error:  # noqa: BLE001 - any build failure means: skip, and say why
        print(f"skipping {DEEPSPEED_CLASS[family]}: {type(error).__name__}: {error}")
        return []
    print(f"  ready in {time.perf_counter() - started:.1f} s")
    return [Case(f"DeepSpeed {DEEPSPEED_CLASS[family]}", lambda params: cls(params, **HYPER[family]))]


def cases_for(family: str, with_deepspeed: bool, fp32: bool) -> list[Case]:
    hyper = HYPER[family]
    ours = {"adam": zero_offload.CPUAdam, "adagrad": zero_offload.CPUAdagrad, "lion": zero_offload.CPULion}[family]
    cases = [Case(f"zero {ours.__name__}", lambda params: ours(params, **hyper))]
    if with_deepspeed:
        cases += deepspeed_cases(family)
    # torch's optimizers keep states in the param's dtype: only fp32 compares like with like.
    torch_optimizer = {"adam": torch.optim.AdamW, "adagrad": torch.optim.Adagrad}.get(family) if fp32 else None
    if torch_optimizer is not None:
        name = torch_optimizer.__name__
        cases.append(Case(f"torch {name}(fused=True)", lambda params: torch_optimizer(params, fused=True, **hyper)))
        cases.append(Case(f"torch {name}(foreach=True)", lambda params: torch_optimizer(params, foreach=True, **hyper)))
    return cases


def time_family(cases: list[Case], grads: torch.Tensor, initial: torch.Tensor, chunks: int,
                repeat: int, bandwidth: Bandwidth) -> dict[str, float]:
    """Best step time per case: each steps its own copy of the params, all see the same grads."""
    size = math.ceil(initial.numel() / chunks)
    optimizers = []
    for case in cases:
        params = list(initial.clone().split(size))
        for param, grad in zip(params, grads.split(size)):
            param.grad = grad
        optimizer = case.make(params)
        optimizer.step()  # warm-up: creates the state
        optimizers.append(optimizer)
    best = {case.name: float("inf") for case in cases}
    timed = list(zip(cases, optimizers))
    for round_ in range(repeat):
        bandwidth.measure()
        shift = round_ % len(timed)  # each case goes first in some round
        for case, optimizer in timed[shift:] + timed[:shift]:
            started = time.perf_counter()
            optimizer.step()
            best[case.name] = min(best[case.name], time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=1 << 25, help="params (default 33554432)")
    parser.add_argument("--sub-groups", type=int, default=8, help="chunks for the sub-group layout (default 8)")
    parser.add_argument("--repeat", type=int, default=5, help="timed steps per optimizer; the best is kept")
    parser.add_argument("--optimizers", default="adam,adagrad,lion", help="families to run (default all)")
    parser.add_argument("--no-deepspeed", action="store_true", help="skip DeepSpeed's ops")
    parser.add_argument("--param-dtype", choices=sorted(DTYPES), default="fp32",
                        help="params and grads; states are fp32 either way (default fp32)")
    args = parser.parse_args()
    families = [name.strip() for name in args.optimizers.split(",") if name.strip()]

    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), "
          f"{torch.get_num_threads()} threads (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}), "
          f"load average {os.getloadavg()[0]:.1f} at the start")
    print(f"{args.numel} {args.param_dtype} params, fp32 states; best of {args.repeat} steps after a warm-up\n")

    bandwidth = Bandwidth()
    generator = torch.Generator().manual_seed(0)
    dtype = DTYPES[args.param_dtype]
    initial = torch.randn(args.numel, generator=generator).to(dtype)
    grads = torch.randn(args.numel, generator=generator).to(dtype)
    results: list[tuple[str, str, str, float]] = []  # family, case, layout, seconds
    ratios: list[str] = []
    for family in families:
        cases = cases_for(family, not args.no_deepspeed, dtype == torch.float32)
        for chunks in (1, args.sub_groups):
            layout = "1 tensor" if chunks == 1 else f"{chunks} sub-groups"
            best = time_family(cases, grads, initial, chunks, args.repeat, bandwidth)
            gc.collect()
            results += [(family, name, layout, seconds) for name, seconds in best.items()]
            ours = best[cases[0].name]
            for name, seconds in list(best.items())[1:]:
                ratios.append(f"{cases[0].name} vs {name}, {layout}: {seconds / ours:.2f}x "
                              f"({ours * 1e3:.1f} vs {seconds * 1e3:.1f} ms)")

    peak = bandwidth.bytes_per_second()
    print(f"\nmemory bandwidth: {peak / 1e9:.2f} GB/s (in-place add_ of 1 GiB tensors, bytes read + written, "
          f"best of {args.repeat * len(families) * 2}, between the steps); "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    rows = []
    for family, name, layout, seconds in results:
        moved = (3 * initial.element_size() + STATE_BYTES_PER_PARAM[family]) * args.numel / seconds
        rows.append((name, layout, f"{seconds * 1e3:.1f}", f"{args.numel / seconds / 1e6:.0f}",
                     f"{moved / 1e9:.2f}", f"{moved / peak:.0%}"))
    print(format_table(["optimizer", "layout", "ms/step", "Mparams/s", "GB/s moved", "of bandwidth"], rows))
    print("\nstep time ratios (above 1: zero is faster)")
    print("\n".join(ratios))


if __name__ == "__main__":
    main()
