"""The engine's data loader: this rank's micro-batches of a dataset, as DeepSpeed's `training_data` gives them."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.utils.data as data


def build_dataloader(
    dataset: data.Dataset[Any], micro_batch_size: int, rank: int, world_size: int,
    collate_fn: Callable[[list[Any]], Any] | None = None,
) -> data.DataLoader[Any]:
    """Micro-batches of this rank's share of the dataset, shuffled by a DistributedSampler as in DeepSpeed."""
    sampler: data.DistributedSampler[Any] = data.DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    return data.DataLoader(dataset, batch_size=micro_batch_size, sampler=sampler, collate_fn=collate_fn)
