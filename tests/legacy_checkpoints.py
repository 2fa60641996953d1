"""Checkpoints written by an earlier zero, kept as test data, and the procedure that loads them.

tests/zero_core/test_checkpoint_legacy.py loads them with today's engine. Everything a committed
checkpoint depends on is frozen here with it: the model (not tests/tied_lora.py, which may change),
the ds_configs and the loading procedure; each case's ds_config and the batch of the step after
loading are also recorded in its expected.json. The data is written once, by hand, by
tests/zero_core/data/make_legacy_checkpoints.py; an existing case is never rewritten, since later code
would then only be checked against itself.

Imported like tied_lora.py (tests/ is on sys.path); the rank functions are module-level so that
spawned ranks import them by name.
"""
from __future__ import annotations

import base64
import hashlib
import io
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

DATA = Path(__file__).resolve().parent / "zero_core" / "data" / "legacy_checkpoints"
EXPECTED = "expected.json"  # in each case's directory, beside `latest` and the tag
VOCAB, HIDDEN, SEQ, LORA_RANK = 23, 15, 8, 3  # odd sizes: the 2-rank partitions are padded
GLOBAL_BATCH, TRAINED_STEPS, WORLD_SIZE = 4, 2, 2
CLIENT_STATE = {"epoch": 1, "note": "legacy"}
CPU_OFFLOAD = {"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}
# name -> (stage, zero_optimization keys beyond the stage's); every case is saved on WORLD_SIZE ranks
CASES: dict[str, tuple[int, dict[str, Any]]] = {
    "stage2": (2, {}),
    "stage3": (3, {}),
    "stage3-cpu-offload": (3, CPU_OFFLOAD),
}


class LegacyModel(torch.nn.Module):
    """Every kind of state a checkpoint holds: an embedding tied to the head, a frozen base under LoRA
    adapters, params small enough to stay whole at stage 3 (norm, down.bias), a persistent buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.base = torch.nn.Linear(HIDDEN, 2 * HIDDEN).requires_grad_(False)
        self.lora_a = torch.nn.Linear(HIDDEN, LORA_RANK, bias=False)
        self.lora_b = torch.nn.Linear(LORA_RANK, 2 * HIDDEN, bias=False)
        self.down = torch.nn.Linear(2 * HIDDEN, HIDDEN)
        self.norm = torch.nn.LayerNorm(HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
        self.head.weight = self.embed.weight
        # Random, so that a fresh model's differs and only loading can make it equal.
        self.register_buffer("position", torch.randn(SEQ, HIDDEN) * 0.1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids) + self.position.to(self.embed.weight.dtype)
        h = h + self.down(F.gelu(self.base(h) + self.lora_b(self.lora_a(h))))
        logits = self.head(self.norm(h))
        return F.cross_entropy(logits.float().reshape(-1, VOCAB), ids.roll(-1, 1).reshape(-1))


def ds_config(stage: int, world_size: int, offload: dict[str, Any]) -> dict[str, Any]:
    """bf16 compute, AdamW with weight decay, a warm-up scheduler (its state is in the checkpoint too; its
    warmup_min_lr is not 0, since a log warm-up from 0 steps the first two steps with lr 0)."""
    return {
        "train_micro_batch_size_per_gpu": GLOBAL_BATCH // world_size, "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-3, "warmup_max_lr": 1e-2,
                                                     "warmup_num_steps": 4}},
        "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 32, **offload},
    }


def resharded_config(saved: dict[str, Any], stage: int, world_size: int) -> dict[str, Any]:
    """A case's recorded ds_config at another stage and world size, without offload; same global batch."""
    zero = {k: v for k, v in saved["zero_optimization"].items() if not k.startswith("offload_")}
    return {**saved, "train_micro_batch_size_per_gpu": GLOBAL_BATCH // world_size,
            "zero_optimization": {**zero, "stage": stage}}


def train_step(engine: Any, batch: torch.Tensor, rank: int, world_size: int) -> float:
    """One step on this rank's share of the global batch; the global batch's mean loss."""
    share = batch.shape[0] // world_size
    loss = engine(batch[rank * share : (rank + 1) * share])
    engine.backward(loss)
    engine.step()
    mean = loss.detach().float().clone()
    dist.all_reduce(mean)
    return float(mean.item()) / world_size


def load_and_step(rank: int, world_size: int, config: dict[str, Any], save_dir: str, scratch: str,
                  batch: torch.Tensor) -> dict[str, Any]:
    """(A rank) load `save_dir` into a fresh engine, then take one step on `batch`.

    The engine's state is read back through public calls only, so that the check survives changes of how
    the engine holds it: the module's weights (module_state_dict), and the fp32 master and optimizer state
    as this engine saves them again, into `scratch` as tag `loaded` (before the step) and `stepped` (after).
    """
    import zero_core

    torch.manual_seed(100 + rank)  # weights other than the saved run's: everything must come from the checkpoint
    engine, _, _, _ = zero_core.initialize(model=LegacyModel(), config=config)
    _, client_state = engine.load_checkpoint(save_dir)
    result = {"client_state": client_state, "global_steps": engine.global_steps, "lr": engine.get_lr(),
              "module": {k: v.clone() for k, v in engine.module_state_dict().items()}}
    engine.save_checkpoint(scratch, tag="loaded")
    result["loss"] = train_step(engine, batch, rank, world_size)
    engine.save_checkpoint(scratch, tag="stepped")
    engine.destroy()
    return result


def sha256(tensor: torch.Tensor) -> str:
    """Of the tensor's bytes, flattened (the checkpoint's 1-D layout), in its own dtype."""
    return hashlib.sha256(tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def encode_fp32(tensor: torch.Tensor) -> str:
    """fp32 values, exactly and compactly (base64 of their little-endian bytes) for expected.json."""
    return base64.b64encode(tensor.detach().float().contiguous().reshape(-1).numpy().astype("<f4").tobytes()).decode()


def decode_fp32(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.float32)


def read_training(directory: Path) -> dict[str, Any]:
    """The `training` object (counters, param groups, optimizer steps, client_state) of a checkpoint this test
    wrote (torch's restricted unpickler, as zero reads it)."""
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.state_dict_loader import load

    state = {"training": io.BytesIO()}
    with warnings.catch_warnings():  # DCP warns that a no_dist load runs in one process: it is meant to
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        load(state, storage_reader=FileSystemReader(directory), no_dist=True)
    state["training"].seek(0)
    training: dict[str, Any] = torch.load(state["training"], weights_only=True)
    return training
