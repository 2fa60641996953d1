"""What each spawned rank of `zero profile` does: build, initialize and measure the model once per setting."""
from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from ._attention import hf_implementation, kernels_in_graph
from ._estimator import estimate_memory, estimate_request
from ._lora import apply_lora
from ._models import build_model
from ._optimizer_kernel import optimizer_kernel
from ._phases import hf_train_step, profile_engine
from ._request import ProfileRequest, Setting

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def profile_rank(rank: int, world_size: int, request: ProfileRequest) -> list[dict[str, Any]]:
    """On one spawned rank: for each setting, the measured phases (and on rank 0 the estimate)."""
    from ..accelerator import get_accelerator

    get_accelerator().count_allocations()  # before any model is built: the allocator is the ruler (on CPU, zero-pin's count)
    generator = torch.Generator().manual_seed(request.seed + rank)
    results = []
    for index, setting in enumerate(request.settings, start=1):
        say = progress(rank, f"{setting.label} ({index}/{len(request.settings)})")
        say("building the model")
        model = prepared_model(request, build_model(request.model_config, DTYPES[request.precision], request.seed,
                                                    attention=hf_implementation(request.attention, dry_run=False)))
        results.append(measure_setting(rank, world_size, request, setting, model, generator, say))
        del model
        gc.collect()
    return results


def prepared_model(request: ProfileRequest, model: torch.nn.Module) -> torch.nn.Module:
    """The model with the request's LoRA adapters and gradient checkpointing."""
    if request.lora_rank is not None:
        apply_lora(model, request.lora_rank)
    if request.gradient_checkpointing:
        if hasattr(model, "activation_checkpointing_enable"):  # transformers 5's name; 4.x's is deprecated there
            getattr(model, "activation_checkpointing_enable")(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            getattr(model, "gradient_checkpointing_enable")(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def measure_setting(rank: int, world_size: int, request: ProfileRequest, setting: Setting, model: torch.nn.Module,
                    generator: torch.Generator, say: Callable[[str], None]) -> dict[str, Any]:
    """Initialize `model` at `setting`, train the request's steps with tracking on, and destroy the engine."""
    from ..accelerator import get_accelerator
    from ..engine import initialize

    accelerator = get_accelerator()
    config = request.config_for(setting)
    estimate = None
    if rank == 0:
        device = accelerator.device(accelerator.current_device()).type
        estimate = estimate_memory({**estimate_request(request, setting), "module": model,
                                    "device": request.target_device or device})
    say("initialize")
    engine, _, _, _ = initialize(model=model, config=config)
    vocab = int(request.model_config.get("vocab_size", 0))
    batches = [torch.randint(0, vocab, (request.micro_batch, request.seq_len), generator=generator).to(engine.device)
               for _ in range(request.steps)]
    caching = engine.device.type != "cpu" and request.dry_run is None  # a device allocator that caches
    if caching:
        accelerator.reset_peak_memory_stats()
    kernels: list[str] = []

    def read_kernels(loss: torch.Tensor) -> None:  # the first step's graph names them
        if not kernels:
            kernels.extend(kernels_in_graph(loss, request.attention))

    measured = profile_engine(engine, partial(hf_train_step, on_loss=read_kernels), batches,
                              progress=lambda step: say(f"step {step}/{request.steps}"))
    allocator = {"ruler": measured.ruler, "locations": measured.allocator_locations,
                 "phases": measured.allocator,
                 "max_reserved": accelerator.max_memory_reserved() if caching else None}
    result = {"setting": setting.as_dict(), "device": engine.device.type, "phases": measured.ledger,
              "estimate": estimate, "allocator": allocator, "absent": measured.absent,
              "optimizer_kernel": optimizer_kernel(engine.optimizer.optimizer),
              "placement": engine.policy.plan.as_dict(), "placement_summary": engine.policy.plan.summary(),
              "attention": {"requested": request.attention.value, "kernels": kernels}}
    engine.destroy()
    return result


def progress(rank: int, what: str) -> Callable[[str], None]:
    def say(message: str) -> None:
        if rank == 0:  # stderr: --json keeps stdout to itself
            print(f"zero profile: {what}: {message}", file=sys.stderr, flush=True)

    return say
