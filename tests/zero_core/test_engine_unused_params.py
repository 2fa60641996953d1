"""Ranks that leave different parameters unused still match collectives and get the right gradients.

Rank r runs only branch r of a two-branch model, so each rank's backward never produces
gradients for the other branch. Buckets are launched in one fixed order, and those left
incomplete are reduced when backward ends, so no rank waits on a collective the other never
starts, and every parameter gets the average over ranks, as one process would compute it.
"""
from __future__ import annotations

import torch

STEPS = 3


class TwoBranches(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.trunk = torch.nn.Linear(4, 6)
        self.branches = torch.nn.ModuleList([torch.nn.Linear(6, 2), torch.nn.Linear(6, 2)])

    def forward(self, x: torch.Tensor, branch: int) -> torch.Tensor:
        return self.branches[branch](torch.tanh(self.trunk(x))).pow(2).mean()


def data() -> torch.Tensor:
    return torch.randn(STEPS, 2, 3, 4, generator=torch.Generator().manual_seed(1))


def _train(rank: int, world_size: int) -> dict[int, dict[str, torch.Tensor]]:
    import zero_core

    results = {}
    for stage in (0, 1, 2):
        config = {"train_batch_size": 6, "gradient_clipping": 0.0, "optimizer": {"type": "SGD", "params": {"lr": 0.5}},
                  "zero_optimization": {"stage": stage, "reduce_bucket_size": 8, "overlap_comm": True}}
        engine, _, _, _ = zero_core.initialize(model=TwoBranches(), config=config)
        for batch in data():
            engine.backward(engine(batch[rank], branch=rank))
            engine.step()
        results[stage] = {name: p.detach().clone() for name, p in engine.module.named_parameters()}
        engine.destroy()
    return results


def test_ranks_with_different_unused_parameters(run_ranks) -> None:  # type: ignore[no-untyped-def]
    model = TwoBranches()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for batch in data():
        ((model(batch[0], 0) + model(batch[1], 1)) / 2).backward()
        optimizer.step()
        optimizer.zero_grad()
    expected = dict(model.named_parameters())
    for rank_result in run_ranks(_train, 2, timeout=120):
        for stage, params in rank_result.items():
            for name, value in params.items():
                torch.testing.assert_close(value, expected[name].detach(), msg=f"stage {stage} {name}")
