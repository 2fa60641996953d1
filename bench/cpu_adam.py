"""zero's CPU optimizers against DeepSpeed's (and optionally torch's), on the same tensors: the median paired ratio.

Each family (adam, adagrad, lion) runs on one tensor of --numel params and on the same params cut
into --sub-groups chunks (what the engine hands over), for --rounds rounds. Each round allocates
the params and states anew, and all optimizers step those same params, grads and states: each
steps once as a warm-up, then its states are replaced by zero's, so that every timed step reads
and writes the same memory. Where a buffer lands in physical memory moves a step's time more than
the difference being measured (on the development VM, of two identical optimizers the one
allocated first was 13-30% faster, and DeepSpeed's Adam took 26 to 46 ms on the same 33.5M params
from one allocation to the next): sharing the memory makes a pair fair, and new memory every
round keeps one lucky or unlucky allocation from deciding the result. In each round zero's step
and DeepSpeed's are timed back to back, in turn first, and their ratio (zero / DeepSpeed: below 1,
zero is faster) is that round's pair; the result per family and layout is the median of those
pairs, checked against --target (0.95): pairs share whatever load the machine has at that moment,
which a best-of-N of each does not. A PASS/FAIL line per family and layout and a final verdict
close the output.

A step over N params is memory-bound: Adam reads param, grad, exp_avg and exp_avg_sq and writes
param, exp_avg and exp_avg_sq (7 x 4 bytes per fp32 param); Adagrad and Lion read 3 and write 2
tensors (5 x 4 bytes). With --param-dtype bf16 the param and grad take 2 bytes and the states
stay fp32 (fp32_optimizer_states; torch's optimizers keep bf16 states and are left out). The
table shows each optimizer's median step time, params/s, and the bytes it must move per second as
a share of the machine's bandwidth, measured once per round between the steps (an in-place add_
of 1 GiB tensors: bytes read + written per second, best of all rounds).

DeepSpeed's CPU ops are built on first use (about 100 s each on an idle 2-core machine, cached in
~/.cache/torch_extensions), and zero's fused op too (about 30 s, see zero_offload.optim); neither
build is timed. Threads: set OMP_NUM_THREADS, which torch, zero's op and DeepSpeed's ops follow.

Usage: OMP_NUM_THREADS=2 python bench/cpu_adam.py [--numel 33554432] [--sub-groups 8] [--rounds 10]
       [--optimizers adam,adagrad,lion] [--param-dtype fp32|bf16] [--target 0.95] [--torch]
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

import zero_offload
from zero_offload.optim import build_cpu_optimizer_op, cpu_optimizer_op_state
from zero_plugins import format_table

# Bytes a step must move per param: the param is read and written and the grad read (3 x the
# param's size), and each fp32 state is read and written (Adam 2, Adagrad and Lion 1 state).
STATE_BYTES_PER_PARAM = {"adam": 2 * 2 * 4, "adagrad": 2 * 4, "lion": 2 * 4}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
DEEPSPEED_CLASS = {"adam": "DeepSpeedCPUAdam", "adagrad": "DeepSpeedCPUAdagrad", "lion": "DeepSpeedCPULion"}
# DeepSpeed's state names for zero's states (its Adagrad calls the sum exp_avg_sq; its Lion also
# keeps an exp_avg_sq that it never reads).
DEEPSPEED_SHARED = {"adam": {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"},
                    "adagrad": {"exp_avg_sq": "sum"}, "lion": {"exp_avg": "exp_avg"}}
TORCH_SHARED = {"adam": {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}, "adagrad": {"sum": "sum"}}
HYPER: dict[str, dict[str, Any]] = {  # one set per family, given to every implementation
    "adam": dict(lr=1e-3, weight_decay=0.01),
    "adagrad": dict(lr=1e-2, weight_decay=0.01),
    "lion": dict(lr=1e-4, betas=(0.9, 0.99), weight_decay=0.01),
}

MakeOptimizer = Callable[[list[torch.Tensor]], Any]


@dataclass
class Case:
    name: str
    make: MakeOptimizer
    shared: dict[str, str] = field(default_factory=dict)  # its state name -> zero's, for the state it takes over
    seconds: list[float] = field(default_factory=list)  # one step time per round


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
        self.count = 0

    def measure(self) -> None:
        started = time.perf_counter()
        self.target.add_(self.source)
        self.best_seconds = min(self.best_seconds, time.perf_counter() - started)
        self.count += 1

    def bytes_per_second(self) -> float:
        return 3 * self.target.numel() * self.target.element_size() / self.best_seconds


def deepspeed_case(family: str) -> Case | None:
    """DeepSpeed's CPU optimizer for `family`, built now so that its build is not timed."""
    try:
        import deepspeed.ops.adagrad
        import deepspeed.ops.adam
        import deepspeed.ops.lion
    except ImportError as error:
        print(f"skipping DeepSpeed: deepspeed is not installed ({error})")
        return None
    module = {"adam": deepspeed.ops.adam, "adagrad": deepspeed.ops.adagrad, "lion": deepspeed.ops.lion}[family]
    cls = getattr(module, DEEPSPEED_CLASS[family])
    print(f"{DEEPSPEED_CLASS[family]}: building DeepSpeed's cpu_{family} op, or loading it if built before "
          "(a build takes about 100 s on an idle 2-core machine) ...", flush=True)
    started = time.perf_counter()
    try:
        cls([torch.zeros(16)], **HYPER[family])
    except Exception as error:  # noqa: BLE001 - any build failure means: skip, and say why
        print(f"skipping {DEEPSPEED_CLASS[family]}: {type(error).__name__}: {error}")
        return None
    print(f"  ready in {time.perf_counter() - started:.1f} s")
    return Case(f"DeepSpeed {DEEPSPEED_CLASS[family]}", lambda params: cls(params, **HYPER[family]),
                DEEPSPEED_SHARED[family])


def cases_for(family: str, with_torch: bool, fp32: bool) -> list[Case]:
    """zero's optimizer first, then DeepSpeed's (if it builds), then torch's (with --torch, fp32 only)."""
    hyper = HYPER[family]
    ours = {"adam": zero_offload.CPUAdam, "adagrad": zero_offload.CPUAdagrad, "lion": zero_offload.CPULion}[family]
    cases = [Case(f"zero {ours.__name__}", lambda params: ours(params, **hyper))]
    deepspeed = deepspeed_case(family)
    if deepspeed is not None:
        cases.append(deepspeed)
    # torch's optimizers keep states in the param's dtype: only fp32 compares like with like.
    torch_optimizer = {"adam": torch.optim.AdamW, "adagrad": torch.optim.Adagrad}.get(family) if fp32 else None
    if with_torch and torch_optimizer is not None:
        name = torch_optimizer.__name__
        cases.append(Case(f"torch {name}(fused=True)", lambda params: torch_optimizer(params, fused=True, **hyper),
                          TORCH_SHARED[family]))
    return cases


def build(cases: list[Case], grads: torch.Tensor, initial: torch.Tensor, chunks: int) -> list[Any]:
    """One optimizer per case on fresh params (a copy of `initial` in `chunks` pieces), each stepped
    once as a warm-up; the others then take over zero's (the first case's) states."""
    size = math.ceil(initial.numel() / chunks)
    params = list(initial.clone().split(size))
    for param, grad in zip(params, grads.split(size)):
        param.grad = grad
    optimizers: list[Any] = []
    for case in cases:
        optimizer = case.make(params)
        optimizer.step()  # warm-up: creates the state, and faults in the new memory
        for param in params:
            for name, zeros_name in case.shared.items():
                optimizer.state[param][name] = optimizers[0].state[param][zeros_name]
        optimizers.append(optimizer)
    return optimizers


def time_family(cases: list[Case], grads: torch.Tensor, initial: torch.Tensor, chunks: int,
                rounds: int, bandwidth: Bandwidth) -> list[float]:
    """Per round, on params and states allocated anew, step every case once (zero and DeepSpeed back
    to back, in turn first, then the rest); each case's step times land in case.seconds. Returns
    the paired ratios zero / DeepSpeed."""
    for case in cases:
        case.seconds = []
    ratios = []
    for round_ in range(rounds):
        optimizers = build(cases, grads, initial, chunks)
        bandwidth.measure()
        order = list(range(len(cases)))
        if round_ % 2 and len(cases) > 1:
            order[0], order[1] = 1, 0
        for index in order:
            started = time.perf_counter()
            optimizers[index].step()
            cases[index].seconds.append(time.perf_counter() - started)
        if len(cases) > 1:
            ratios.append(cases[0].seconds[-1] / cases[1].seconds[-1])
        del optimizers
        gc.collect()  # frees this round's buffers before the next round allocates its own
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=1 << 25, help="params (default 33554432)")
    parser.add_argument("--sub-groups", type=int, default=8, help="chunks for the sub-group layout (default 8)")
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds; each times every optimizer once")
    parser.add_argument("--optimizers", default="adam,adagrad,lion", help="families to run (default all)")
    parser.add_argument("--param-dtype", choices=sorted(DTYPES), default="fp32",
                        help="params and grads; states are fp32 either way (default fp32)")
    parser.add_argument("--target", type=float, default=0.95,
                        help="pass if the median ratio zero / DeepSpeed is at most this (default 0.95)")
    parser.add_argument("--torch", action="store_true", help="also time torch's fused optimizer (fp32 only)")
    args = parser.parse_args()
    families = [name.strip() for name in args.optimizers.split(",") if name.strip()]

    build_cpu_optimizer_op()  # not timed: about 30 s the first time, then loaded from the cache
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), "
          f"{torch.get_num_threads()} threads (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}), "
          f"load average {os.getloadavg()[0]:.1f} at the start")
    print(f"zero's fused op: {cpu_optimizer_op_state()['state']}")
    print(f"{args.numel} {args.param_dtype} params, fp32 states; {args.rounds} rounds, each on new memory after a "
          "warm-up step\n")

    bandwidth = Bandwidth()
    generator = torch.Generator().manual_seed(0)
    dtype = DTYPES[args.param_dtype]
    initial = torch.randn(args.numel, generator=generator).to(dtype)
    grads = torch.randn(args.numel, generator=generator).to(dtype)
    rows = []
    verdicts: list[tuple[bool, str]] = []
    for family in families:
        cases = cases_for(family, args.torch, dtype == torch.float32)
        for chunks in (1, args.sub_groups):
            layout = "1 tensor" if chunks == 1 else f"{chunks} sub-groups"
            ratios = time_family(cases, grads, initial, chunks, args.rounds, bandwidth)
            gc.collect()
            for case in cases:
                seconds = statistics.median(case.seconds)
                moved = (3 * initial.element_size() + STATE_BYTES_PER_PARAM[family]) * args.numel / seconds
                rows.append((case.name, layout, f"{seconds * 1e3:.1f}", f"{args.numel / seconds / 1e6:.0f}",
                             f"{moved / 1e9:.2f}", moved))
            if ratios:
                median = statistics.median(ratios)
                verdicts.append((median <= args.target,
                                 f"{cases[0].name} / {cases[1].name}, {layout}: median {median:.3f} over "
                                 f"{len(ratios)} pairs (min {min(ratios):.3f}, max {max(ratios):.3f})"))

    peak = bandwidth.bytes_per_second()
    print(f"\nmemory bandwidth: {peak / 1e9:.2f} GB/s (in-place add_ of 1 GiB tensors, bytes read + written, "
          f"best of {bandwidth.count}, between the steps); load average {os.getloadavg()[0]:.1f} at the end")
    print(format_table(["optimizer", "layout", "median ms/step", "Mparams/s", "GB/s moved", "of bandwidth"],
                       [(*row[:5], f"{row[5] / peak:.0%}") for row in rows]))
    print(f"\nstep time ratio zero / DeepSpeed, median of paired rounds (pass: <= {args.target})")
    for passed, line in verdicts:
        print(f"{'PASS' if passed else 'FAIL'}  {line}")
    if verdicts:
        failed = sum(not passed for passed, _ in verdicts)
        print(f"\n{'PASS' if not failed else 'FAIL'}: {len(verdicts) - failed} of {len(verdicts)} "
              f"at or below {args.target}x DeepSpeed's step time")
    else:
        print("\nno verdict: DeepSpeed's optimizers did not run")


if __name__ == "__main__":
    main()
