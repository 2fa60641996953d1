"""The swapped step overlaps its swap I/O with the sub-groups' steps, in the order the transfers start.

One process steps a linear of 8 sub-groups (1024 fp32 elements each) with the optimizer state on NVMe,
recording when each read and write of a master slot starts. With `pipeline_read` and `pipeline_write`
and 9 buffers (Adam: 3 per sub-group), in a step after the first (which makes the state) the read of
sub-group k+1 starts before the write of sub-group k: it is read while k steps. When the pool is full of writes
still to finish, the read ahead waits for the oldest of them; before it did, a full pool read nothing
ahead, every later read started after the previous sub-group's writes and was waited for in full.
Without `pipeline_read`, each read starts after the previous sub-group's writes. No time is measured.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import zero_core
from swap_helpers import direct_directory
from zero_core.offload import SwapSlot, SwapTransfer
from zero_offload.nvme._space import NvmeSwapSpace

SUB_GROUPS, SUB_GROUP = 8, 1024
FEATURES = 64  # a linear of 64 x 128 weights: 8 sub-groups of 1024 elements

pytestmark = pytest.mark.usefixtures("solo_process_group")


def _master_transfers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """("read" or "write", sub-group) of every master slot transfer, as each starts."""
    started: list[tuple[str, int]] = []

    def recording(kind: str) -> Any:
        original = getattr(NvmeSwapSpace, kind)

        def transfer(self: NvmeSwapSpace, slot: SwapSlot, tensor: torch.Tensor) -> SwapTransfer:
            if slot.name.startswith("group0.bucket0.sub") and slot.name.count(".") == 2:
                started.append((kind, int(slot.name.rsplit("sub", 1)[1])))
            return original(self, slot, tensor)

        return transfer

    monkeypatch.setattr(NvmeSwapSpace, "read", recording("read"))
    monkeypatch.setattr(NvmeSwapSpace, "write", recording("write"))
    return started


def _second_step(root: Path, monkeypatch: pytest.MonkeyPatch, pipeline_read: bool) -> list[tuple[str, int]]:
    torch.manual_seed(0)
    config = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
              "zero_optimization": {"stage": 2, "sub_group_size": SUB_GROUP,
                                    "offload_optimizer": {"device": "nvme", "nvme_path": str(root),
                                                          "buffer_count": 9, "pipeline_read": pipeline_read,
                                                          "pipeline_write": True}}}
    engine = zero_core.initialize(model=torch.nn.Linear(FEATURES, 2 * FEATURES, bias=False), config=config)[0]
    started = _master_transfers(monkeypatch)
    for _ in range(2):  # the first step makes the state: the second is every later one
        started.clear()
        engine.backward(engine(torch.randn(2, FEATURES)).pow(2).mean())
        engine.step()
    engine.destroy()
    return started


def _position(started: list[tuple[str, int]], kind: str, sub_group: int) -> int:
    return started.index((kind, sub_group))


def test_each_sub_group_is_read_while_the_one_before_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for root in direct_directory(tmp_path):
        started = _second_step(root, monkeypatch, pipeline_read=True)
        assert sorted(started) == sorted([("read", k) for k in range(SUB_GROUPS)]
                                         + [("write", k) for k in range(SUB_GROUPS)])
        for k in range(SUB_GROUPS - 1):
            assert _position(started, "read", k + 1) < _position(started, "write", k), (k, started)


def test_without_pipeline_read_each_read_follows_the_writes_before(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for root in direct_directory(tmp_path):
        started = _second_step(root, monkeypatch, pipeline_read=False)
        for k in range(SUB_GROUPS - 1):
            assert _position(started, "write", k) < _position(started, "read", k + 1), (k, started)
