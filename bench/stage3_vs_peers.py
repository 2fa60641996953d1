"""zero stage 3 against torch FSDP2 (`fully_shard`) and DeepSpeed 0.19.8 stage 3: same model and data, one run.

    .venv/bin/python bench/stage3_vs_peers.py

For each framework in turn it launches `torchrun --standalone --nproc_per_node 2` on this
file (DS_ACCELERATOR=cpu, OMP_NUM_THREADS=1, gloo), so each starts in fresh processes. Each
rank trains a scaled-down GPT-NeoX (transformers, random init) in bf16 on the same tokens:
- zero: `zero_core.initialize` with the stage-3 ds_config below;
- deepspeed: `deepspeed.initialize` with the same ds_config (torch's AdamW via `torch_adam`);
- fsdp2: `fully_shard` on every transformer layer and on the root, over a CPU device mesh
  (gloo), `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16)`, torch AdamW on the
  fp32 sharded parameters, `clip_grad_norm_` 1.0 (FSDP2's own way to train in bf16).

Reported per rank: the peak of tensor bytes (a StorageTracker over the build and the first
two steps, which create the optimizer state), zero's ledger peak next to it, peak RSS, mean
step time over the remaining steps, and every figure as a ratio to zero's. zero's and
DeepSpeed's losses must agree step by step (bf16 tolerance), and FSDP2's must track them;
the script exits 1 otherwise.
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

import zero_core
from zero_core import StorageTracker, get_accelerator

MiB = 1024 * 1024
FRAMEWORKS = ("zero", "deepspeed", "fsdp2")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12, help="steps per framework (the first 2 are not timed)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--persistence", type=int, default=10_000, help="stage3_param_persistence_threshold")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    return parser.parse_args()


def ds_config(args: argparse.Namespace, world_size: int) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": args.micro_batch,
        "train_batch_size": args.micro_batch * world_size,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.0, "torch_adam": True}},
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": args.persistence,
                              "reduce_bucket_size": 2_000_000, "stage3_prefetch_bucket_size": 2_000_000},
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
    result.update(losses=[_global_mean(loss) for loss in losses], step_seconds=sum(times) / len(times),
                  peak_rss_bytes=accelerator.max_memory_reserved())
    return result


def _global_mean(loss: torch.Tensor) -> float:
    value = loss.detach().float().clone()
    dist.all_reduce(value)
    return value.item() / dist.get_world_size()


def _engine_step(engine: Any, batch: torch.Tensor) -> torch.Tensor:
    loss = engine(input_ids=batch, labels=batch).loss
    engine.backward(loss)
    engine.step()
    return loss


def run_zero(args: argparse.Namespace, data: list[torch.Tensor]) -> dict[str, Any]:
    holder: dict[str, Any] = {}

    def build() -> Callable[[torch.Tensor], torch.Tensor]:
        # DeepSpeed casts the model to bf16 before it takes its fp32 master; start from the same weights
        model = make_model(args).to(torch.bfloat16)
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


def run_fsdp2(args: argparse.Namespace, data: list[torch.Tensor]) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    def build() -> Callable[[torch.Tensor], torch.Tensor]:
        model = make_model(args)
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
        for layer in model.gpt_neox.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0)

        def step(batch: torch.Tensor) -> torch.Tensor:
            loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss

        return step

    return measure(build, data)


RUNNERS: dict[str, Callable[[argparse.Namespace, list[torch.Tensor]], dict[str, Any]]] = {
    "zero": run_zero, "deepspeed": run_deepspeed, "fsdp2": run_fsdp2}


def report(args: argparse.Namespace, per_rank: list[dict[str, dict[str, Any]]]) -> int:
    params = sum(p.numel() for p in make_model(args).parameters())
    print(f"\nGPT-NeoX {params / 1e6:.2f}M params, bf16, stage 3 (persistence threshold {args.persistence}), "
          f"{len(per_rank)} ranks, micro-batch {args.micro_batch} x {args.seq} tokens, "
          f"{args.steps} steps (last {args.steps - 2} timed)")
    header = (f"{'rank':>4}  {'framework':<11}{'peak tensors':>14}{'/ zero':>8}{'zero ledger':>13}{'peak RSS':>11}"
              f"{'/ zero':>8}{'step s':>9}{'/ zero':>8}")
    print(header)
    print("-" * len(header))
    for rank, results in enumerate(per_rank):
        ours = results["zero"]
        for name in FRAMEWORKS:
            r = results[name]
            ledger = f"{r['ledger_peak_bytes'] / MiB:.1f} MiB" if "ledger_peak_bytes" in r else "-"
            print(f"{rank:>4}  {name:<11}{r['peak_tensor_bytes'] / MiB:>10.1f} MiB"
                  f"{r['peak_tensor_bytes'] / ours['peak_tensor_bytes']:>8.2f}{ledger:>13}"
                  f"{r['peak_rss_bytes'] / MiB:>7.0f} MiB{r['peak_rss_bytes'] / ours['peak_rss_bytes']:>8.2f}"
                  f"{r['step_seconds']:>9.3f}{r['step_seconds'] / ours['step_seconds']:>8.2f}")
    exact = all(r["zero"]["ledger_peak_bytes"] == r["zero"]["peak_tensor_bytes"] for r in per_rank)
    print(f"zero's ledger peak {'equals' if exact else 'differs from'} the storage tracker's on every rank")
    print("\nzero ledger peaks by category (rank 0):")
    for category, peak in per_rank[0]["zero"]["ledger"].items():
        print(f"  {category:<20}{peak / MiB:>10.2f} MiB")
    losses = {name: per_rank[0][name]["losses"] for name in FRAMEWORKS}
    print("\nstep  " + "".join(f"{name + ' loss':<16}" for name in FRAMEWORKS))
    for step in range(args.steps):
        print(f"{step:>4}  " + "".join(f"{losses[name][step]:<16.6f}" for name in FRAMEWORKS))
    worst = {name: max(abs(a - b) / abs(b) for a, b in zip(losses[name], losses["zero"])) for name in FRAMEWORKS[1:]}
    agree = worst["deepspeed"] <= 1e-2 and worst["fsdp2"] <= 2e-2
    print("worst relative loss difference to zero: " + ", ".join(f"{n} {w:.2e}" for n, w in worst.items())
          + f" ({'agree' if agree else 'DISAGREE'}: DeepSpeed within 1e-2, FSDP2 within 2e-2)")
    return 0 if agree else 1


def worker(args: argparse.Namespace) -> None:
    """One framework on this rank (under torchrun); rank 0 writes every rank's results to --out."""
    dist.init_process_group("gloo")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.worker == "deepspeed":
        import deepspeed  # noqa: F401  (imported before the measurement, like everything else)
    import transformers  # noqa: F401

    results = RUNNERS[args.worker](args, batches(args, dist.get_rank()))
    per_rank: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, results)
    if dist.get_rank() == 0:
        Path(args.out).write_text(json.dumps(per_rank))
    dist.destroy_process_group()


def launch(args: argparse.Namespace, framework: str, out: Path) -> list[dict[str, Any]]:
    torchrun = Path(sys.executable).with_name("torchrun")
    options = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
               if v is not None and k not in ("worker", "out", "json", "ranks")]
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
