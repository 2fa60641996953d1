"""Write the legacy checkpoints that tests/zero_core/test_checkpoint_legacy.py loads. Run by hand only:

    cd <repository> && PYTHONPATH=$(ls -d $PWD/packages/*/src | paste -sd:) OMP_NUM_THREADS=1 \\
        .venv/bin/python tests/zero_core/data/make_legacy_checkpoints.py

No test runs it. For each case of tests/legacy_checkpoints.py whose directory under legacy_checkpoints/
is not there yet, on 2 spawned ranks: train LegacyModel 2 steps and save (tag global_step2, `latest`),
then load that into a fresh engine as the test does and take one more step; <case>/expected.json records
what the test must then see (the saved tensors' hashes, counters, learning rate, optimizer step, the
next step's loss and fp32 master) and the ds_config. A case that is there is left alone: it is what the
code named in its expected.json wrote, and the point of the data is that later code loads it.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the shared helpers, as under pytest

from legacy_checkpoints import (  # noqa: E402
    CASES, CLIENT_STATE, DATA, EXPECTED, GLOBAL_BATCH, SEQ, TRAINED_STEPS, VOCAB, WORLD_SIZE, LegacyModel,
    ds_config, encode_fp32, load_and_step, read_training, sha256, train_step,
)
from multirank import run_ranks  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[3]


def train_and_save(rank: int, world_size: int, config: dict[str, Any], save_dir: str, scratch: str,
                   batches: torch.Tensor) -> dict[str, Any]:
    """(A rank) train TRAINED_STEPS steps and save; then the uninterrupted run's next step, saved to `scratch`."""
    import zero_core

    torch.manual_seed(0)
    engine, _, _, _ = zero_core.initialize(model=LegacyModel(), config=config)
    losses = [train_step(engine, batches[step], rank, world_size) for step in range(TRAINED_STEPS)]
    engine.save_checkpoint(save_dir, client_state=CLIENT_STATE)
    next_loss = train_step(engine, batches[TRAINED_STEPS], rank, world_size)
    engine.save_checkpoint(scratch, tag="uninterrupted")
    engine.destroy()
    return {"losses": losses, "next_loss": next_loss}


def _code_version() -> str:
    """The last commit that changed packages/, refusing uncommitted changes there: the data must be what a
    named commit's code writes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPOSITORY, check=True, capture_output=True, text=True).stdout.strip()

    if git("status", "--porcelain", "packages"):
        sys.exit("packages/ has uncommitted changes: commit them first, so that expected.json can name the code")
    return git("log", "-1", "--format=%H", "--", "packages")


def _masters(directory: Path) -> dict[str, torch.Tensor]:
    from zero_core.checkpoint import SavedCheckpoint

    saved = SavedCheckpoint.open(directory.parent, directory.name)
    return {key.removeprefix("master."): saved.read(key) for key in saved.tensors if key.startswith("master.")}


def _write_case(name: str, stage: int, offload: dict[str, Any], commit: str, work: Path) -> None:
    from zero_core.checkpoint import SavedCheckpoint

    config = ds_config(stage, WORLD_SIZE, offload)
    batches = torch.randint(0, VOCAB, (TRAINED_STEPS + 1, GLOBAL_BATCH, SEQ),
                            generator=torch.Generator().manual_seed(3))
    save_dir, scratch = work / name, work / f"{name}.scratch"
    trained = run_ranks(train_and_save, WORLD_SIZE, config, str(save_dir), str(scratch), batches, timeout=300)[0]
    loaded = run_ranks(load_and_step, WORLD_SIZE, config, str(save_dir), str(scratch), batches[TRAINED_STEPS],
                       timeout=300)[0]
    saved = SavedCheckpoint.open(save_dir)
    tensors = {key: saved.read(key) for key in sorted(saved.tensors)}
    training = read_training(save_dir / saved.tag)
    stepped = _masters(scratch / "stepped")
    # Today's engine must pass its own test, and resuming must continue the uninterrupted run bit for bit.
    resaved = SavedCheckpoint.open(scratch, "loaded")
    problems = [key for key in tensors if key.startswith(("master.", "optim."))
                and not torch.equal(resaved.read(key), tensors[key])]
    problems += [key for name, value in loaded["module"].items() for key in (f"model.{name}", f"buffer.{name}")
                 if key in tensors and not torch.equal(value.reshape(-1), tensors[key])]
    if loaded["loss"] != trained["next_loss"]:
        problems.append(f"next loss {loaded['loss']!r} after loading, {trained['next_loss']!r} uninterrupted")
    uninterrupted = _masters(scratch / "uninterrupted")
    problems += [f"master.{key} after the next step" for key in stepped
                 if not torch.equal(stepped[key], uninterrupted[key])]
    if problems:
        sys.exit(f"{name}: today's engine does not reload its own checkpoint exactly: {', '.join(problems)}")
    expected = {
        "written_by": {"commit": commit, "torch": torch.__version__},
        "world_size": WORLD_SIZE, "ds_config": config, "tag": saved.tag,
        "train_losses": trained["losses"],
        "client_state": training["client_state"], "counters": training["counters"],
        "lr": [group["lr"] for group in training["param_groups"]],
        "optimizer_steps": [float(step) for step in training["optimizer_steps"]],
        "sha256": {key: sha256(value) for key, value in tensors.items()},
        "next_batch": batches[TRAINED_STEPS].tolist(),
        "next_loss": loaded["loss"],
        "master_after_next_step": {key: encode_fp32(value) for key, value in sorted(stepped.items())},
    }
    (save_dir / EXPECTED).write_text(json.dumps(expected, indent=1) + "\n")
    shutil.move(str(save_dir), DATA / name)  # only a complete case reaches the repository
    print(f"{name}: wrote {DATA / name} (next loss {loaded['loss']!r})")


def main() -> None:
    commit = _code_version()
    DATA.mkdir(parents=True, exist_ok=True)
    for name, (stage, offload) in CASES.items():
        if (DATA / name).exists():
            print(f"{name}: already there, left as it is")
            continue
        with tempfile.TemporaryDirectory(prefix="legacy-checkpoints-") as work:
            _write_case(name, stage, offload, commit, Path(work))


if __name__ == "__main__":
    main()
