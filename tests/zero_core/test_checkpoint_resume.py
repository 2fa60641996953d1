"""Resume: a checkpoint saved at one world size and stage continues at another exactly as the run would have.

A reference run on 2 ranks trains 3 steps, saves, and trains 3 more. Each resume builds a
fresh engine (other initial weights) at its own world size and stage, loads the checkpoint
and trains the same last 3 steps on the same global batches: its losses (the mean over the
global batch) must equal the reference's, fp32, relative 1e-6, and so must the final weights
on 2 ranks; on 1 rank the gradients are summed in another order, so weights close to zero
are compared to 1e-5. The model
has a tied embedding, a frozen base under a LoRA adapter and small params that stay whole at
stage 3; the config's scheduler (WarmupLR) and AdamW's state must come back too, or the
losses drift. Cases: stage 2 -> stage 3 on 1 and 2 ranks, stage 3 -> stage 2, stage 1 with
CPU offload -> stage 3 without, and stage 3 with both offloads -> stage 2 on 1 rank, and NVMe offload of the optimizer state and
of the partitions past `max_in_cpu`, saved from and loaded into swap files, and NVMe offload at the default
sub_group_size, whose budget slices are cut one way at stage 2 and another at stage 3.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from multirank import run_ranks
from tied_lora import SEQ, VOCAB, TiedLoRA

GLOBAL_BATCH, STEPS, SAVED_AT = 4, 6, 3
CPU = {"offload_optimizer": {"device": "cpu"}}
BOTH = {**CPU, "offload_param": {"device": "cpu"}}
NVME_PATH = "<nvme>"  # replaced by a directory where O_DIRECT works, per run
NVME = {"offload_optimizer": {"device": "nvme", "nvme_path": NVME_PATH, "buffer_count": 6, "pipeline_read": True},
        "offload_param": {"device": "nvme", "nvme_path": NVME_PATH, "max_in_cpu": 1000, "buffer_size": 4096},
        "sub_group_size": 700}
# The default sub_group_size: the swapped master is cut into budget slices of one 4 KiB block (aio below).
NVME_SLICES = {"offload_optimizer": {"device": "nvme", "nvme_path": NVME_PATH}}


def _config(stage: int, world_size: int, offload: dict[str, Any]) -> dict[str, Any]:
    offload = {key: {**block, "nvme_path": os.environ["ZERO_TEST_NVME_PATH"]}
               if isinstance(block, dict) and block.get("nvme_path") == NVME_PATH else block
               for key, block in offload.items()}
    return {
        "aio": {"block_size": 4096},
        "train_micro_batch_size_per_gpu": GLOBAL_BATCH // world_size, "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01, **({} if offload else {"fused": True})}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-2, "warmup_num_steps": 4}},
        "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 32, "reduce_bucket_size": 3000,
                              **offload},
    }


def _batches() -> torch.Tensor:
    return torch.randint(0, VOCAB, (STEPS, GLOBAL_BATCH, SEQ), generator=torch.Generator().manual_seed(3))


def _train(engine: Any, steps: range, rank: int, world_size: int) -> list[float]:
    data, share = _batches(), GLOBAL_BATCH // world_size
    losses = []
    for step in steps:
        loss = engine(data[step][rank * share : (rank + 1) * share])
        engine.backward(loss)
        engine.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world_size)
    return losses


def _reference(rank: int, world_size: int, stage: int, offload: dict[str, Any], save_dir: str) -> dict[str, Any]:
    import zero_core

    torch.manual_seed(7)
    engine, _, _, _ = zero_core.initialize(model=TiedLoRA(), config=_config(stage, world_size, offload))
    losses = _train(engine, range(SAVED_AT), rank, world_size)
    engine.save_checkpoint(save_dir, client_state={"epoch": 1})
    losses += _train(engine, range(SAVED_AT, STEPS), rank, world_size)
    state = {k: v.float() for k, v in engine.module_state_dict().items()}
    engine.destroy()
    return {"losses": losses, "state": state}


def _resume(rank: int, world_size: int, stage: int, offload: dict[str, Any], save_dir: str) -> dict[str, Any]:
    import zero_core

    torch.manual_seed(100 + rank)  # other initial weights: everything must come from the checkpoint
    engine, _, _, _ = zero_core.initialize(model=TiedLoRA(), config=_config(stage, world_size, offload))
    path, client_state = engine.load_checkpoint(save_dir)
    assert engine.global_steps == SAVED_AT and client_state == {"epoch": 1}
    assert Path(path).name == f"global_step{SAVED_AT}"
    losses = _train(engine, range(SAVED_AT, STEPS), rank, world_size)
    state = {k: v.float() for k, v in engine.module_state_dict().items()}
    engine.destroy()
    return {"losses": losses, "state": state}


# name: (saved at stage, offload), (resumed at stage, ranks, offload)
CASES: dict[str, tuple[tuple[int, dict[str, Any]], tuple[int, int, dict[str, Any]]]] = {
    "stage2-to-stage3-2ranks": ((2, {}), (3, 2, {})),
    "stage2-to-stage3-1rank": ((2, {}), (3, 1, {})),
    "stage3-to-stage2-1rank": ((3, {}), (2, 1, {})),
    "stage1-cpu-offload-to-stage3": ((1, CPU), (3, 2, {})),
    "stage3-both-offloads-to-stage2-1rank": ((3, BOTH), (2, 1, {})),
    "stage2-to-stage3-both-offloads": ((2, {}), (3, 2, BOTH)),
    "stage3-nvme-to-stage2-1rank": ((3, NVME), (2, 1, {})),
    "stage1-to-stage3-nvme": ((1, {}), (3, 2, NVME)),
    "stage2-nvme-slices-to-stage3-nvme-slices-1rank": ((2, NVME_SLICES), (3, 1, NVME_SLICES)),
}


def _swap_directory(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A directory where O_DIRECT works: pytest's, else one in the repository (tmpfs refuses O_DIRECT)."""
    from zero_offload.swap._direct import direct_io_problem

    candidate = tmp_path_factory.mktemp("nvme")
    if direct_io_problem(str(candidate)) is None:
        return str(candidate)
    fallback = Path(__file__).resolve().parents[2] / ".pytest-tmp" / candidate.name
    fallback.mkdir(parents=True, exist_ok=True)
    return str(fallback)


def _references(rank: int, world_size: int, root: str) -> dict[str, dict[str, Any]]:
    """Every case's reference run, one after the other in one 2-rank job, each saving into its own directory."""
    return {name: _reference(rank, world_size, *saved, str(Path(root) / name)) for name, (saved, _) in CASES.items()}


def _resumes(rank: int, world_size: int, root: str) -> dict[str, dict[str, Any]]:
    """Every case that resumes on `world_size` ranks, in one job."""
    return {name: _resume(rank, world_size, stage, offload, str(Path(root) / name))
            for name, (_, (stage, ranks, offload)) in CASES.items() if ranks == world_size}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    root = str(tmp_path_factory.mktemp("checkpoints"))
    env = {"ZERO_TEST_NVME_PATH": _swap_directory(tmp_path_factory)}
    references = run_ranks(_references, 2, root, timeout=300, env=env)[0]
    resumed = {**run_ranks(_resumes, 2, root, timeout=300, env=env)[0],
               **run_ranks(_resumes, 1, root, timeout=300, env=env)[0]}
    return {name: (references[name], resumed[name]) for name in CASES}


@pytest.mark.parametrize("name", CASES)
def test_resume_at_another_world_size_and_stage_continues_the_run(
        name: str, runs: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    reference, resumed = runs[name]
    ranks = CASES[name][1][1]
    tolerance = {"rtol": 1e-6, "atol": 1e-7}
    torch.testing.assert_close(torch.tensor(resumed["losses"]), torch.tensor(reference["losses"][SAVED_AT:]),
                               **tolerance)
    # Gradients summed in another order (another world size, or stage 3's reduction against stages 1-2's, which
    # groups the small persistent params apart): weights differ by an fp32 rounding or two (1.1e-7 seen on
    # norm.bias on an AVX-512 host, stage 2 -> 3 at 2 ranks), near zero in relative terms (|d| ~ 1e-6).
    if ranks != 2 or 3 in (CASES[name][0][0], CASES[name][1][0]):
        tolerance = {"rtol": 1e-5, "atol": 1e-5}
    for key, value in reference["state"].items():
        torch.testing.assert_close(resumed["state"][key], value, **tolerance,
                                   msg=lambda m, key=key: f"{key}: {m}")
