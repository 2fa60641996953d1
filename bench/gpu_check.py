"""The CUDA paths on one GPU, in one run: `make gpu-check` (written to take under 8 minutes on one H200).

    .venv/bin/python bench/gpu_check.py [--json gpu_check.json] [--rehearse-on-cpu]

Nothing in the suite or the other benches runs on a GPU (CI has none). This script runs what only a GPU can
show, and prints one table (also written as JSON):

1. parity: stages 0 to 3 on NCCL at world size 1, zero's engine against plain torch (a GPT-NeoX of hidden 256,
   4 layers, fp32, AdamW, 4 steps on the same tokens): every loss within 1e-4 relative. Two ranks on one device
   are not tried: NCCL refuses two ranks on one GPU.
2. profile: `zero profile` on the GPU (1 rank, pythia-tiny with LoRA rank 8, stages 2 and 3, memory_efficient_linear
   both; its ruler is torch.cuda.max_memory_allocated) beside `zero profile --dry-run --device cuda` of the same
   settings: each phase's allocator peak within 2%.
3. pinned bandwidth: 1 GiB host-to-device and device-to-host from memory pinned by the selected pin backend
   (DS_PIN_MEMORY_BACKEND), best of 5, against PCIe 5.0 x16's 63 GB/s per direction.
4. CPU offload step: zero's stage-2 step with `offload_optimizer: cpu` (a GPT-NeoX of hidden 1024, 8 layers,
   bf16), the mean of steps 3 to 6, beside DeepSpeed's with the same ds_config where DeepSpeed is installed.

Without a CUDA device it says so in one line and exits 2: nothing was checked. `--rehearse-on-cpu` runs checks
1, 2 and 4 on the CPU accelerator (gloo) instead, to test this script where no GPU is (the figures then say
nothing about CUDA); check 3 needs a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # multirank
sys.path.insert(0, str(Path(__file__).resolve().parent))  # _peers_measure, also in the spawned ranks

import torch
from zero_plugins import format_table

ROOT = Path(__file__).resolve().parent.parent
PCIE5_X16_GBPS = 63.0  # bytes per second per direction / 1e9: 32 GT/s x 16 lanes, 128b/130b
Row = dict[str, Any]


def _tiny_neox(hidden: int, layers: int, device: str, dtype: torch.dtype) -> torch.nn.Module:
    """The peers benches' GPT-NeoX (_peers_measure.make_model: no dropout, seeded), on `device` in `dtype`."""
    from _peers_measure import make_model

    model = make_model(argparse.Namespace(vocab=8192, hidden=hidden, layers=layers, seq=512))
    return model.to(device=device, dtype=dtype).train()


def _batches(count: int, device: str) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 8192, (2, 128), generator=generator).to(device) for _ in range(count)]


def _parity_rank(rank: int, world_size: int, device: str) -> list[Row]:
    import copy

    import zero_core

    rows = []
    for stage in range(4):
        model = _tiny_neox(256, 4, device, torch.float32)
        reference = copy.deepcopy(model)
        optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-3, weight_decay=0.01)
        config = {"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.0,
                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
                  "zero_optimization": {"stage": stage}}
        engine, _, _, _ = zero_core.initialize(model=model, config=config)
        worst = 0.0
        for batch in _batches(4, device):
            ours = engine(input_ids=batch, labels=batch).loss
            engine.backward(ours)
            engine.step()
            theirs = reference(input_ids=batch, labels=batch).loss
            theirs.backward()
            optimizer.step()
            optimizer.zero_grad()
            worst = max(worst, abs(ours.item() - theirs.item()) / abs(theirs.item()))
        engine.destroy()
        rows.append({"check": f"parity, stage {stage}", "figure": f"worst loss difference {worst:.1e} (relative)",
                     "value": worst, "passed": worst <= 1e-4})
    return rows


def check_parity(device: str, env: dict[str, str]) -> list[Row]:
    from multirank import run_ranks

    rows: list[Row] = run_ranks(_parity_rank, 1, device, timeout=300, env=env)[0]
    return rows


def _profile(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    zero = Path(sys.executable).with_name("zero")
    done = subprocess.run([str(zero), "profile", "--model", "pythia-tiny", "--lora-rank", "8", "--nproc", "1",
                           "--stages", "2,3", "--memory-efficient-linear", "both", "--micro-batch", "2",
                           "--seq-len", "256", "--steps", "3", "--json", *args], capture_output=True, text=True,
                          check=False, env={**os.environ, **env}, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"zero profile {' '.join(args)} failed: {done.stderr[-1500:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def check_profile(device: str, env: dict[str, str]) -> list[Row]:
    real, dry = _profile([], env), _profile(["--dry-run", "--device", device], {})
    rows = []
    for measured, traced in zip(real["settings"], dry["settings"]):
        errors = {}
        for phase, figures in measured["phases"].items():
            allocator = figures["allocator"]["allocator"]
            errors[phase] = (traced["phases"][phase]["allocator"]["allocator"] - allocator) / allocator
        worst = max(errors, key=lambda phase: abs(errors[phase]))
        rows.append({"check": f"profile vs dry run, {measured['label']}", "value": errors[worst],
                     "figure": f"ruler {measured['ruler']}; worst phase {worst}: dry run {errors[worst]:+.2%}",
                     "passed": all(abs(error) <= 0.02 for error in errors.values()), "phases": errors})
    return rows


def check_bandwidth() -> list[Row]:
    import zero_pin

    nbytes = 1 << 30
    host = zero_pin.pin_memory(torch.empty(nbytes, dtype=torch.uint8), make_copy=False)
    device = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    rows = []
    for name, copy in (("host to device", lambda: device.copy_(host, non_blocking=True)),
                       ("device to host", lambda: host.copy_(device, non_blocking=True))):
        best = float("inf")
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            copy()
            end.record()
            torch.cuda.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        rate = nbytes / best / 1e9
        rows.append({"check": f"pinned bandwidth, {name}", "value": rate,
                     "figure": f"{rate:.1f} GB/s, {rate / PCIE5_X16_GBPS:.0%} of PCIe 5.0 x16 (pin backend: "
                               f"{os.environ.get('DS_PIN_MEMORY_BACKEND', 'the default')})",
                     "passed": rate >= 0.5 * PCIE5_X16_GBPS})
    return rows


def _offload_rank(rank: int, world_size: int, device: str, framework: str) -> float:
    config = {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
              "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}}
    model = _tiny_neox(1024, 8, device, torch.bfloat16)
    if framework == "deepspeed":
        import deepspeed

        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    else:
        import zero_core

        engine, _, _, _ = zero_core.initialize(model=model, config=config)
    times = []
    for batch in _batches(6, device):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        engine.backward(engine(input_ids=batch, labels=batch).loss)
        engine.step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return sum(times[2:]) / len(times[2:])


def check_offload(device: str, env: dict[str, str]) -> list[Row]:
    from multirank import run_ranks

    ours = run_ranks(_offload_rank, 1, device, "zero", timeout=300, env=env)[0]
    row: Row = {"check": "CPU offload step", "value": ours, "passed": True,
                "figure": f"zero {ours * 1e3:.0f} ms per step"}
    if device != "cuda":
        row["figure"] += "; DeepSpeed compared on a GPU only (bench/offload_vs_peers.py compares on CPU)"
        return [row]
    try:
        import deepspeed  # noqa: F401  (installed or not: the row says which)
    except ImportError:
        row["figure"] += "; DeepSpeed not installed, not compared"
        return [row]
    theirs = run_ranks(_offload_rank, 1, device, "deepspeed", timeout=400, env=env)[0]
    row.update(figure=f"zero {ours * 1e3:.0f} ms, DeepSpeed {theirs * 1e3:.0f} ms per step: {ours / theirs:.2f}x",
               passed=ours <= theirs, deepspeed=theirs)
    return [row]


def _run(name: str, check: Callable[[], list[Row]]) -> list[Row]:
    print(f"gpu check: {name} ...", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        rows = check()
    except Exception as error:  # one check failing must not hide the others' figures
        rows = [{"check": name, "figure": f"failed: {type(error).__name__}: {str(error)[:300]}", "passed": False}]
    for row in rows:
        row["seconds"] = round(time.monotonic() - started, 1)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", default="gpu_check.json", help="where to write the results (default gpu_check.json)")
    parser.add_argument("--rehearse-on-cpu", action="store_true",
                        help="run the checks that can on the CPU accelerator, to test this script without a GPU")
    args = parser.parse_args()
    if args.rehearse_on_cpu:
        device, env = "cpu", {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    elif torch.cuda.is_available():
        device, env = "cuda", {"DS_ACCELERATOR": "cuda"}
    else:
        built = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "built without CUDA"
        print(f"gpu check: no CUDA device here (torch {torch.__version__}, {built}); nothing was checked. Run it "
              "where a GPU is, or pass --rehearse-on-cpu to test the script itself", file=sys.stderr)
        return 2
    rows = _run("parity", lambda: check_parity(device, env)) + _run("profile", lambda: check_profile(device, env))
    if device == "cuda":
        rows += _run("pinned bandwidth", check_bandwidth)
    rows += _run("CPU offload step", lambda: check_offload(device, env))
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU rehearsal (no CUDA figure)"
    print(f"gpu check on {where}")
    print(format_table(["check", "result", "figure", "s"],
                       [(row["check"], "ok" if row["passed"] else "FAILED", row["figure"], str(row["seconds"]))
                        for row in rows]))
    Path(args.json).write_text(json.dumps({"device": where, "torch": torch.__version__, "rows": rows}, indent=2))
    print(f"wrote {args.json}")
    return 0 if all(row["passed"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
