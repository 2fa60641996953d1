"""FSDP2's side of bench/scale_vs_fsdp2.py: torch's FSDPMemTracker over two training iterations of FSDP2.

    python bench/_fsdp2_tracker.py --model pythia-6.9b --nproc 8 --seq-len 2048 [--checkpointing]

Rank 0 of a fake process group of NPROC ranks, every tensor fake (torch's FakeTensorMode: no memory): the
model of zero profile's config of the preset (fp32 weights, eager attention), `fully_shard` on every
transformer layer and then on the root with bf16 compute and fp32 reduction, optionally checkpointing every
layer, AdamW with foreach=True; micro-batch 1 x SEQ_LEN tokens (input ids as labels). Prints one JSON object
to stdout: the second iteration's peak, its categories and the phase that set it, the first iteration's, and
the model states right after the second step. Progress goes to stderr.

The fake tensors are CPU tensors: a CPU build of torch cannot trace autograd on fake CUDA tensors (the
autograd engine asks CUDA for a device guard and aborts), so the tracker counts bytes exactly rather than in
CUDA's 512-byte blocks, which at these sizes differs by far less than 0.1%.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from enum import Enum
from typing import Any

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.testing._internal.distributed.fake_pg import FakeStore
from transformers import AutoModelForCausalLM
from zero_core.profile._models import model_config, transformers_config

# What the tracker files as model states: FSDP2 keeps fp32 sharded weights, fp32 sharded gradients (the
# reduce-scatter's output, in the weights' dtype) and AdamW's state.
MODEL_STATES = ("Sharded Param", "Sharded Grad", "OptState")


def _progress(started: float, message: str) -> None:
    print(f"fsdp2 tracker: {message} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)


def _layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer layers: the modules transformers checkpoints one by one (GradientCheckpointingLayer)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [module for module in model.modules() if isinstance(module, GradientCheckpointingLayer)]


def trace(preset: str, nproc: int, seq_len: int, checkpointing: bool) -> dict[str, Any]:
    started = time.monotonic()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=nproc)
    mesh = init_device_mesh("cpu", (nproc,))
    device = torch.device("cpu")
    with FakeTensorMode(allow_non_fake_inputs=True):
        # zero profile's config of the preset; fp32 weights, transformers' default, as FSDP2 keeps them
        model: torch.nn.Module = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            transformers_config(model_config(preset)), attn_implementation="eager")
        model.train()
        parameters = sum(param.numel() for param in model.parameters())
        _progress(started, f"built {preset} ({parameters:,} parameters)")
        if checkpointing:  # as zero profile --gradient-checkpointing does (transformers 5's name, else 4.x's)
            kwargs = {"use_reentrant": False}
            if hasattr(model, "activation_checkpointing_enable"):
                getattr(model, "activation_checkpointing_enable")(activation_checkpointing_kwargs=kwargs)
            else:
                getattr(model, "gradient_checkpointing_enable")(gradient_checkpointing_kwargs=kwargs)
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        layers = _layers(model)
        for layer in layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        vocab = int(getattr(model, "config").vocab_size)
        batch = torch.randint(0, vocab, (1, seq_len))
        _progress(started, f"sharded {len(layers)} layers and the root over {nproc} ranks")

        tracker = FSDPMemTracker(model, optimizer)
        tracker.track_inputs((batch,))
        first_at = _iteration(tracker, model, optimizer, batch, 1, started)[0]
        first_peak = _by_name(tracker.get_tracker_snapshot("peak")[device])
        tracker.reset_mod_stats()  # else the tracker refuses the root's second forward
        # Entering the tracker again starts its peak from what is alive now: the second iteration alone, as
        # zero profile measures the steps after the first (which creates AdamW's state).
        peak_at, after_step = _iteration(tracker, model, optimizer, batch, 2, started)
        peak = _by_name(tracker.get_tracker_snapshot("peak")[device])
    dist.destroy_process_group()
    return {"device": str(device), "parameters": parameters, "nproc": nproc, "seq_len": seq_len,
            "checkpointing": checkpointing, "optimizer": "AdamW foreach=True",
            "peak": {"bytes": peak.pop("Total"), "phase": peak_at, "categories": peak},
            "first_iteration_peak": {"bytes": first_peak.pop("Total"), "phase": first_at, "categories": first_peak},
            "after_step": after_step,
            "model_states_after_step": sum(after_step.get(key, 0) for key in MODEL_STATES),
            "seconds": time.monotonic() - started}


def _iteration(tracker: FSDPMemTracker, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               batch: torch.Tensor, iteration: int, started: float) -> tuple[str, dict[str, int]]:
    """One iteration under the tracker: the phase in which its peak was last raised, and what the tracker holds
    right after the optimizer's step (its temporaries freed, the gradients still held)."""
    device = batch.device
    outputs: dict[str, Any] = {}  # the forward's loss, for the backward
    phases: dict[str, Callable[[], object]] = {
        "forward": lambda: outputs.setdefault("loss", model(input_ids=batch, labels=batch).loss),
        "backward": lambda: outputs.pop("loss").backward(),
        "step": optimizer.step,
        "zero_grad": optimizer.zero_grad,
    }
    peak_at = "entry"
    after_step: dict[str, int] = {}
    with tracker:
        for phase, run in phases.items():
            before = tracker.get_tracker_snapshot("peak")[device]["Total"]
            run()
            if tracker.get_tracker_snapshot("peak")[device]["Total"] > before:
                peak_at = phase
            if phase == "step":
                after_step = _by_name(tracker.get_tracker_snapshot("current")[device])
                after_step.pop("Total")
            _progress(started, f"iteration {iteration}: {phase}")
    return peak_at, after_step


def _by_name(snapshot: dict[Any, int]) -> dict[str, int]:
    """A tracker snapshot keyed by the categories' names (the tracker's keys are enum members)."""
    return {key.value if isinstance(key, Enum) else key: value for key, value in snapshot.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="pythia-6.9b")
    parser.add_argument("--nproc", type=int, required=True)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--checkpointing", action="store_true")
    args = parser.parse_args()
    print(json.dumps(trace(args.model, args.nproc, args.seq_len, args.checkpointing)))


if __name__ == "__main__":
    main()
