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
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.optim  # noqa: F401  (ZeroRedundancyOptimizer)

import zero_core
from zero_core import StorageTracker, get_accelerator

MiB = 1024 * 1024


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stage", type=int, default=2, choices=[0, 1, 2])
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--steps", type=int, default=12, help="steps per framework (the first 2 are not timed)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--bucket", type=int, default=2_000_000, help="reduce/allgather bucket size (elements)")
    parser.add_argument("--loss-rtol", type=float, default=None, help="default: 1e-5 for fp32, 1e-2 for bf16")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--worker", choices=list(FRAMEWORKS), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    return parser.parse_args()


def ds_config(args: argparse.Namespace, world_size: int) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": args.micro_batch,
        "gradient_accumulation_steps": 1,
        "train_batch_size": args.micro_batch * world_size,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": args.dtype == "bf16"},
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.0, "torch_adam": True}},
        "zero_optimization": {"stage": args.stage, "reduce_bucket_size": args.bucket,
                              "allgather_bucket_size": args.bucket, "overlap_comm": False},
    }


def make_model(args: argparse.Namespace) -> torch.nn.Module:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                           num_attention_heads=8, intermediate_size=4 * args.hidden,
                           max_position_embeddings=args.seq, attn_implementation="eager")
    torch.manual_seed(0)
    return GPTNeoXForCausalLM(config)


def batches(args: argparse.Namespace, rank: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + rank)
    return [torch.randint(0, args.vocab, (args.micro_batch, args.seq), generator=generator) for _ in range(args.steps)]


def measure(build: Callable[[], Callable[[torch.Tensor], torch.Tensor]], data: list[torch.Tensor],
            after_tracked: Callable[[], dict[str, Any]] = dict) -> dict[str, Any]:
    """Build and take two steps inside a StorageTracker, then time the rest untracked."""
    accelerator = get_accelerator()
    gc.collect()
    accelerator.reset_peak_memory_stats()
    rss_start = accelerator.memory_reserved()
    losses = []
    with StorageTracker() as tracker:
        step = build()
        for batch in data[:2]:
            losses.append(step(batch))
    result: dict[str, Any] = {"peak_tensor_bytes": tracker.peak_bytes("cpu"), **after_tracked()}
    times = []
    for batch in data[2:]:
        start = time.perf_counter()
        losses.append(step(batch))
        times.append(time.perf_counter() - start)
    result.update(
        losses=[_global_mean(loss) for loss in losses],
        step_seconds=sum(times) / len(times),
        peak_rss_bytes=accelerator.max_memory_reserved(),
        rss_rise_bytes=accelerator.max_memory_reserved() - rss_start,
    )
    return result


def _global_mean(loss: torch.Tensor) -> float:
    value = loss.detach().float().clone()
    dist.all_reduce(value)
    return value.item() / dist.get_world_size()


def run_zero(args: argparse.Namespace, data: list[torch.Tensor]) -> dict[str, Any]:
    holder: dict[str, Any] = {}

    def build() -> Callable[[torch.Tensor], torch.Tensor]:
        model = make_model(args)
        if args.dtype == "bf16":
            model = model.to(torch.bfloat16)  # as DeepSpeed does before it takes the master (see docstring)
        engine, _, _, _ = zero_core.initialize(model=model, config=ds_config(args, dist.get_world_size()))
        engine.track_memory(True)
        holder["engine"] = engine
        return lambda batch: _engine_step(engine, batch)

    def ledger() -> dict[str, Any]:
        engine = holder["engine"]
        engine.track_memory(False)
        report = engine.memory_report()["cpu"]
        return {"ledger_peak_bytes": report["total"]["peak"],
                "ledger": {category: figures["peak"] for category, figures in report.items()}}

    result = measure(build, data, ledger)
    holder["engine"].destroy()
    return result


def run_deepspeed(args: argparse.Namespace, data: list[torch.Tensor]) -> dict[str, Any]:
    import deepspeed

    def build() -> Callable[[torch.Tensor], torch.Tensor]:
        model = make_model(args)
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=ds_config(args, dist.get_world_size()))
        return lambda batch: _engine_step(engine, batch)

    return measure(build, data)


def _engine_step(engine: Any, batch: torch.Tensor) -> torch.Tensor:
    loss = engine(input_ids=batch, labels=batch).loss
    engine.backward(loss)
    engine.step()
    return loss


def run_torch(args: argparse.Namespace, data: list[torch.Tensor], zero_redundancy: bool) -> dict[str, Any]:
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    autocast = args.dtype == "bf16"

    def build() -> Callable[[torch.Tensor], torch.Tensor]:
        model = DistributedDataParallel(make_model(args))
        if zero_redundancy:
            optimizer: torch.optim.Optimizer = ZeroRedundancyOptimizer(
                model.parameters(), optimizer_class=torch.optim.AdamW, lr=3e-4, weight_decay=0.0)
        else:
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0)

        def step(batch: torch.Tensor) -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss

        return step

    return measure(build, data)


def run_ddp(args: argparse.Namespace, data: list[torch.Tensor]) -> dict[str, Any]:
    return run_torch(args, data, zero_redundancy=False)


def run_zero_redundancy(args: argparse.Namespace, data: list[torch.Tensor]) -> dict[str, Any]:
    return run_torch(args, data, zero_redundancy=True)


FRAMEWORKS: dict[str, Callable[[argparse.Namespace, list[torch.Tensor]], dict[str, Any]]] = {
    "zero": run_zero,
    "deepspeed": run_deepspeed,
    "ddp": run_ddp,
    "zero_redundancy": run_zero_redundancy,
}


def report(args: argparse.Namespace, per_rank: list[dict[str, dict[str, Any]]]) -> int:
    names = list(per_rank[0])
    params = sum(p.numel() for p in make_model(args).parameters())
    print(f"\nGPT-NeoX {params / 1e6:.2f}M params, {args.dtype}, stage {args.stage}, {len(per_rank)} ranks, "
          f"micro-batch {args.micro_batch} x {args.seq} tokens, {args.steps} steps (last {args.steps - 2} timed)")
    header = f"{'rank':>4}  {'framework':<16}{'peak tensors':>14}{'zero ledger':>13}{'peak RSS':>11}" \
             f"{'RSS rise':>11}{'step s':>9}{'time / zero':>13}"
    print(header)
    print("-" * len(header))
    for rank, results in enumerate(per_rank):
        zero_time = results["zero"]["step_seconds"]
        for name in names:
            r = results[name]
            ledger = f"{r['ledger_peak_bytes'] / MiB:.1f} MiB" if "ledger_peak_bytes" in r else "-"
            print(f"{rank:>4}  {name:<16}{r['peak_tensor_bytes'] / MiB:>10.1f} MiB{ledger:>13}"
                  f"{r['peak_rss_bytes'] / MiB:>7.0f} MiB{r['rss_rise_bytes'] / MiB:>7.0f} MiB"
                  f"{r['step_seconds']:>9.3f}{r['step_seconds'] / zero_time:>13.2f}")
    exact = all(r["zero"]["ledger_peak_bytes"] == r["zero"]["peak_tensor_bytes"] for r in per_rank)
    print(f"zero's ledger peak {'equals' if exact else 'DIFFERS FROM'} the storage tracker's on every rank")
    print("\nzero ledger peaks by category (rank 0):")
    for category, peak in per_rank[0]["zero"]["ledger"].items():
        print(f"  {category:<18}{peak / MiB:>10.2f} MiB")
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


def worker(args: argparse.Namespace) -> None:
    """One framework on this rank (under torchrun); rank 0 writes every rank's results to --out."""
    dist.init_process_group("gloo")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.worker == "deepspeed":
        import deepspeed  # noqa: F401  (imported before the RSS baseline, like everything else)
    import transformers  # noqa: F401

    results = FRAMEWORKS[args.worker](args, batches(args, dist.get_rank()))
    per_rank: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, results)
    if dist.get_rank() == 0:
        Path(args.out).write_text(json.dumps(per_rank))
    dist.destroy_process_group()


def launch(args: argparse.Namespace, framework: str, out: Path) -> list[dict[str, Any]]:
    torchrun = Path(sys.executable).with_name("torchrun")
    options = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
               if v is not None and k not in ("worker", "out", "json", "ranks", "loss_rtol")]
    command = [str(torchrun), "--standalone", f"--nproc_per_node={args.ranks}", __file__, f"--worker={framework}",
               f"--out={out}", *options]
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    print(f"running {framework}: {' '.join(command)}", flush=True)
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def main() -> int:
    args = parse_args()
    if args.worker:
        worker(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        by_framework = {name: launch(args, name, Path(tmp) / f"{name}.json") for name in FRAMEWORKS}
    per_rank = [{name: by_framework[name][rank] for name in FRAMEWORKS} for rank in range(args.ranks)]
    status = report(args, per_rank)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "per_rank": per_rank}, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
