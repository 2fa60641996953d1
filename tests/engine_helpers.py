"""Models and memory helpers shared by the engine tests (stages 0-2 and 3).

Imported at the top of test modules that need torch (never by conftest.py: zero-cli and
zero-estimate are tested without torch); tests/ is on sys.path as for multirank.py.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import torch

MEMORY_MODEL_INPUTS = {"dense": 32, "lora": 64}  # in_features of memory_model(kind)


class LoRALinear(torch.nn.Module):
    """A frozen base linear with trainable low-rank adapters beside it."""

    def __init__(self, base: torch.nn.Linear, rank: int = 4) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.lora_a = torch.nn.Linear(base.in_features, rank, bias=False)
        self.lora_b = torch.nn.Linear(rank, base.out_features, bias=False)

    @classmethod
    def new(cls, features_in: int, features_out: int, rank: int = 4) -> LoRALinear:
        """Adapters beside a freshly initialised base (drawn from torch's generator before the adapters)."""
        return cls(torch.nn.Linear(features_in, features_out), rank)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.lora_b(self.lora_a(x))


def memory_model(kind: str) -> torch.nn.Module:
    """"dense": a small MLP; "lora": LoRA adapters on frozen 64x64 bases. Sizes are multiples of 4 (no padding)."""
    torch.manual_seed(0)
    if kind == "dense":
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                   torch.nn.Linear(64, 16))
    return torch.nn.Sequential(LoRALinear.new(64, 64), torch.nn.ReLU(), LoRALinear.new(64, 64), torch.nn.ReLU(),
                               LoRALinear.new(64, 64))


def count_params(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, frozen) elements."""
    return (sum(p.numel() for p in model.parameters() if p.requires_grad),
            sum(p.numel() for p in model.parameters() if not p.requires_grad))


def memory_config(zero: dict[str, Any], **top: Any) -> dict[str, Any]:
    """The memory tests' ds_config: micro-batches of 4, bf16, Adam; `zero` is its zero_optimization block."""
    return {
        "train_micro_batch_size_per_gpu": 4,
        "bf16": {"enabled": True},
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        **top,
        "zero_optimization": zero,
    }


def collective_counts(engine: Any, field: str = "sent_bytes") -> dict[str, int]:
    """One figure ("sent_bytes", "calls", "payload_bytes") of each collective so far, from engine.memory_report()."""
    return {op: figures[field] for op, figures in engine.memory_report().comm.items()}


def collective_delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """How much each collective's figure grew between two collective_counts(); the unchanged ones are left out."""
    return {op: after[op] - before.get(op, 0) for op in after if after[op] != before.get(op, 0)}


def wait_until_freed(engine: Any, categories: tuple[str, ...], timeout: float = 10.0) -> None:
    """Wait until the buffers the engine freed in these ledger categories are really gone.

    gloo's worker thread drops its reference to a communicated tensor a moment after the
    collective has completed, so its storage dies shortly after the engine lets go of it. With
    a model this small the next backward could allocate before that and the peaks would
    count both; real models spend far longer in forward.
    """
    deadline = time.monotonic() + timeout
    while any(engine.ledger.current(c) for c in categories):
        assert time.monotonic() < deadline, f"{', '.join(categories)} still alive long after the engine freed them"
        time.sleep(0.001)


def module_numels(model: torch.nn.Module) -> list[int]:
    """Elements of each module's own parameters (a tied one counts for its first module): one unit each."""
    seen: set[int] = set()
    numels = []
    for module in model.modules():
        own = [p for p in module.parameters(recurse=False) if id(p) not in seen]
        seen.update(map(id, own))
        if own:
            numels.append(sum(p.numel() for p in own))
    return numels


SMALL_CONFIG: dict[str, Any] = {"train_micro_batch_size_per_gpu": 2,
                                "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}, "zero_optimization": {"stage": 2}}


def small_trained_engine(config: dict[str, Any] | None = None) -> Any:
    """A two-layer MLP initialized with `config` (default SMALL_CONFIG) after one step: what checkpoint tests save."""
    import zero_core

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))
    engine, _, _, _ = zero_core.initialize(model=model, config=config or SMALL_CONFIG)
    engine.backward(engine(torch.randn(2, 8)).pow(2).mean())
    engine.step()
    return engine


def save_small_checkpoint(rank: int, world_size: int, root: str, tag: str, client_state: dict[str, Any]) -> None:
    """(A rank) save `small_trained_engine()` as `tag` of `root`."""
    engine = small_trained_engine()
    engine.save_checkpoint(root, tag=tag, client_state=client_state)
    engine.destroy()


class WarningRecords(logging.Handler):
    """The messages of WARNING and above logged to the logger it is added to, in order."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
