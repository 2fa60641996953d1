"""Pinned host buffers requested per training step, zero against DeepSpeed, with the same ds_config and model.

    .venv/bin/python bench/pinning_per_step.py [--steps 6] [--ranks 2]

Each framework runs in fresh `torchrun --standalone --nproc_per_node 2` processes (gloo, OMP_NUM_THREADS=1)
on the peers benches' GPT-NeoX: stage 2, `offload_optimizer: {device: cpu, pin_memory: true}`, and activation
checkpointing with `cpu_checkpointing` (each framework's own `checkpointing.checkpoint`, set as the Hugging
Face model's gradient-checkpointing function, the route of an unchanged DeepSpeed script), two micro-batches
per optimizer step.

Counted per step, identically for both: every request for pinned host memory the framework makes through
the Python API, whatever the accelerator does with it (this CPU machine pins nothing): calls of its
accelerator's `pin_memory`, of `Tensor.pin_memory`, and of `torch.empty`/`zeros`/`empty_like` with
`pin_memory=True`; and, for zero, zero-pin's own count (`engine.memory_report().pinning`), which also
sees `zero_pin.empty_pinned`. Reported: the requests and bytes of step 1 and of each later step.
The acceptance check: zero requests nothing after step 1. Exits 1 otherwise.
"""
from __future__ import annotations

import argparse
import functools
import sys
from typing import Any

import torch
import torch.distributed as dist

from _peers_measure import MiB, PerRank, add_model_args, base_ds_config, make_model
from _peers_run import add_run_args, main

FRAMEWORKS = ("zero", "deepspeed")
GRADIENT_ACCUMULATION = 2


class PinRequests:
    """Counts pinned-memory requests made through Python while installed (one process, all threads)."""

    def __init__(self) -> None:
        self.calls = 0
        self.bytes = 0

    def install(self, accelerator: Any) -> None:
        self._wrap_method(torch.Tensor, "pin_memory")
        self._wrap_method(accelerator, "pin_memory")
        for name in ("empty", "zeros", "empty_like"):
            self._wrap_factory(name)

    def _count(self, tensor: torch.Tensor) -> None:
        self.calls += 1
        self.bytes += tensor.numel() * tensor.element_size()

    def _wrap_method(self, owner: Any, name: str) -> None:
        """`Tensor.pin_memory(self)` or `accelerator.pin_memory(tensor)`: the tensor to pin comes first either way."""
        original = getattr(owner, name)

        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self._count(args[0])
            return original(*args, **kwargs)

        setattr(owner, name, counted)

    def _wrap_factory(self, name: str) -> None:
        original = getattr(torch, name)

        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if kwargs.get("pin_memory"):
                self._count(result)
            return result

        setattr(torch, name, counted)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_args(parser)  # --steps counts micro-batches here: two per optimizer step
    add_run_args(parser, FRAMEWORKS)
    return parser.parse_args()


def ds_config(args: argparse.Namespace, world_size: int) -> dict[str, Any]:
    config = base_ds_config(args, world_size, bf16=False)
    # Two micro-batches per step: DeepSpeed's CPU offload accumulates gradients in host buffers it pins anew
    config["gradient_accumulation_steps"] = GRADIENT_ACCUMULATION
    config["train_batch_size"] *= GRADIENT_ACCUMULATION
    del config["optimizer"]["params"]["torch_adam"]  # CPU offload steps each framework's CPU Adam
    config["zero_optimization"] = {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}
    config["activation_checkpointing"] = {"cpu_checkpointing": True, "partition_activations": True}
    return config


def _run(args: argparse.Namespace, data: list[torch.Tensor], framework: str) -> dict[str, Any]:
    config = ds_config(args, dist.get_world_size())
    model = make_model(args)
    if framework == "zero":
        import zero_core
        from zero_core import checkpointing

        checkpointing.configure(deepspeed_config=config)
        model._set_gradient_checkpointing(True, checkpointing.checkpoint)
        engine, _, _, _ = zero_core.initialize(model=model, config=config)
        accelerator: Any = zero_core.get_accelerator()
    else:
        import deepspeed
        from deepspeed.accelerator import get_accelerator

        deepspeed.init_distributed(dist_backend="gloo")  # checkpointing.configure needs DeepSpeed's comm
        deepspeed.checkpointing.configure(None, deepspeed_config=config)
        model._set_gradient_checkpointing(True, deepspeed.checkpointing.checkpoint)
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
        accelerator = get_accelerator()
    model.train()
    requests = PinRequests()
    requests.install(accelerator)
    per_step = []
    for first in range(0, len(data), GRADIENT_ACCUMULATION):
        before = (requests.calls, requests.bytes)
        for batch in data[first:first + GRADIENT_ACCUMULATION]:
            loss = engine(input_ids=batch, labels=batch).loss
            engine.backward(loss)
            engine.step()
        per_step.append({"calls": requests.calls - before[0], "bytes": requests.bytes - before[1]})
    result: dict[str, Any] = {"per_step": per_step}
    if framework == "zero":
        result["zero_pin"] = engine.memory_report().pinning
    return result


RUNNERS = {name: functools.partial(lambda framework, args, data: _run(args, data, framework), name)
           for name in FRAMEWORKS}


def report(args: argparse.Namespace, per_rank: PerRank) -> int:
    print(f"\nstage 2, offload_optimizer cpu (pin_memory true), cpu_checkpointing, {args.ranks} ranks, "
          f"{args.steps // GRADIENT_ACCUMULATION} optimizer steps of {GRADIENT_ACCUMULATION} micro-batches; "
          "pinned-memory requests per optimizer step: count / MiB")
    print(f"{'rank':>4}  {'framework, counted by':<28}{'step 1':>16}   each later step")
    status = 0
    for rank, rows in enumerate(per_rank):
        zero_pin_steps = [{"calls": s["allocations"], "bytes": s["allocated_bytes"]} for s in rows["zero"]["zero_pin"]]
        lines = (("zero, zero_pin.pin_activity", zero_pin_steps), ("zero, the Python API", rows["zero"]["per_step"]),
                 ("deepspeed, the Python API", rows["deepspeed"]["per_step"]))
        for label, steps in lines:
            first, *later = steps
            later_text = ", ".join(f"{s['calls']}/{s['bytes'] / MiB:.2f}" for s in later)
            print(f"{rank:>4}  {label:<28}{first['calls']:>6} / {first['bytes'] / MiB:>6.2f}   {later_text}")
        copies = [s["copies"] for s in rows["zero"]["zero_pin"][1:]]
        quiet = all(s["calls"] == 0 for _, steps in lines[:2] for s in steps[1:]) and not any(copies)
        print(f"      zero after step 1: {'nothing pinned, allocated or copied' if quiet else 'PINS AGAIN'}")
        if not quiet:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(parse_args(), __file__, RUNNERS, report))
