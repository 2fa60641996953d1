"""Resuming from DeepSpeed 0.19.8's own checkpoints (skipped where DeepSpeed is not installed).

Two gloo ranks train a small GPT-NeoX with DeepSpeed at stages 1, 2 and 3, in fp32 and bf16
(torch's AdamW via `torch_adam`, WarmupLR, gradient clipping), and save at step 3
(`global_step3/`: DeepSpeed's model states and per-rank optimizer files). The reference is
DeepSpeed's own resume: a fresh DeepSpeed engine (other initial weights) loads that
checkpoint and trains steps 3-5. zero resumes from the same checkpoint and trains the same
steps on the same global batches (4 sequences a step):

- on 2 ranks at the same stage, through `engine.load_checkpoint(<DeepSpeed's save_dir>)`,
  which converts the checkpoint on the fly;
- on 1 rank at another stage (1 -> 2, 2 -> 3, 3 -> 1), from what `zero checkpoint import`
  wrote, in a process where `import deepspeed` fails (so nothing of it is needed).

Each step's loss (the mean over the global batch) must equal DeepSpeed's, relative 1e-5 in
fp32 (on 1 rank the gradients are summed in another order: 2e-7 seen) and 5e-4 in bf16. bf16
on 2 ranks runs the same bf16 kernels on the same shapes and agrees exactly; on 1 rank the
forward multiplies bf16 matrices of another batch shape (4 sequences, not 2), whose fp32
accumulation rounds differently, and the next bf16 weights (the fp32 master rounded to 8
significant bits) can land on neighbouring values: 3e-5 seen. The bound stays well under
what losing state costs here: resuming without the optimizer state moves these losses by
3.7e-3, without the scheduler's by 3.3e-3.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from hf_models import SMALL_GPT_NEOX, gpt_neox

GLOBAL_BATCH, SEQ, STEPS, SAVED_AT = 4, 16, 6, 3
# Odd sizes (a 65-wide MLP, 97 tokens), so that DeepSpeed pads between parameters (its
# `parameter_alignment`, stages 1-2) and pads stage-3 partitions; padding at the end of the last
# rank's partition is in the test without DeepSpeed below.
MODEL = {**SMALL_GPT_NEOX, "vocab_size": 97, "intermediate_size": 65}
VOCAB = MODEL["vocab_size"]
# Frozen (no optimizer state; DeepSpeed saves them whole at stages 1-2, in per-rank pieces at stage 3).
FROZEN = ("gpt_neox.layers.0.mlp.dense_h_to_4h.bias", "gpt_neox.final_layer_norm.bias")
# DeepSpeed-only layout switches: parameters reordered across ranks and aligned to 16 bytes in the flat groups.
DEEPSPEED_LAYOUT = {"round_robin_gradients": True, "parameter_alignment": True}
CASES = [(stage, dtype) for stage in (1, 2, 3) for dtype in ("fp32", "bf16")]
OTHER_STAGE = {1: 2, 2: 3, 3: 1}
RTOL = {"fp32": 1e-5, "bf16": 5e-4}


def _config(stage: int, dtype: str, world_size: int) -> dict[str, Any]:
    return {
        "train_batch_size": GLOBAL_BATCH, "train_micro_batch_size_per_gpu": GLOBAL_BATCH // world_size,
        "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01, "torch_adam": True}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-2, "warmup_num_steps": 4}},
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 4000, "allgather_bucket_size": 4000,
                              "stage3_param_persistence_threshold": 100},
        **({"bf16": {"enabled": True}} if dtype == "bf16" else {}),
    }


def _train(engine: Any, steps: range, rank: int, world_size: int) -> list[float]:
    data = torch.randint(0, VOCAB, (STEPS, GLOBAL_BATCH, SEQ), generator=torch.Generator().manual_seed(8))
    share, losses = GLOBAL_BATCH // world_size, []
    for step in steps:
        ids = data[step][rank * share : (rank + 1) * share]
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
        mean = loss.detach().float().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world_size)
    return losses


def _model(seed: int) -> torch.nn.Module:
    model = gpt_neox(seed, **MODEL)
    for name in FROZEN:
        model.get_parameter(name).requires_grad_(False)
    return model


def _case_dir(root: str, stage: int, dtype: str) -> str:
    return str(Path(root) / f"stage{stage}-{dtype}")


def _deepspeed_then_zero(rank: int, world_size: int, root: str) -> dict[tuple[str, int, str], Any]:
    """On 2 ranks: DeepSpeed trains and saves, DeepSpeed resumes (the reference), zero resumes."""
    from deepspeed_peer import import_deepspeed

    deepspeed = import_deepspeed()
    import zero_core

    deepspeed.init_distributed(dist_backend="gloo")
    results: dict[tuple[str, int, str], Any] = {}
    for stage, dtype in CASES:
        config, save_dir = _config(stage, dtype, world_size), _case_dir(root, stage, dtype)
        ds_config = {**config, "zero_optimization": {**config["zero_optimization"], **DEEPSPEED_LAYOUT}}
        model = _model(5)
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
        _train(engine, range(SAVED_AT), rank, world_size)
        engine.save_checkpoint(save_dir, client_state={"epoch": 1})
        engine.destroy()
        for name, initialize, run_config in (("deepspeed", deepspeed.initialize, ds_config),
                                             ("zero", zero_core.initialize, config)):
            model = _model(6)  # other initial weights: everything must come from the checkpoint
            engine, _, _, _ = initialize(model=model, model_parameters=model.parameters(), config=run_config)
            _, client_state = engine.load_checkpoint(save_dir)
            results[name, stage, dtype] = {"steps": engine.global_steps, "epoch": client_state["epoch"],
                                           "lr": engine.get_lr(), "losses": _train(engine, range(SAVED_AT, STEPS),
                                                                                   rank, world_size)}
            engine.destroy()
    return results


def _zero_alone(rank: int, world_size: int, root: str, imported: str) -> dict[tuple[int, str], Any]:
    """On 1 rank, without DeepSpeed: `zero checkpoint import`, then resume at another stage."""
    sys.modules["deepspeed"] = None  # type: ignore[assignment]  # `import deepspeed` fails from here on
    import zero_core
    from zero_core.checkpoint import checkpoint_command

    results: dict[tuple[int, str], Any] = {}
    for stage, dtype in CASES:
        out = str(Path(imported) / f"stage{stage}-{dtype}")
        result = checkpoint_command(argparse.Namespace(action="import", dir=_case_dir(root, stage, dtype), out=out,
                                                       tag=None, trust_checkpoint=False))
        assert result.exit_code == 0 and result.data["stage"] == stage and result.data["world_size"] == 2, result.text
        model = _model(6)
        engine, _, _, _ = zero_core.initialize(model=model, model_parameters=model.parameters(),
                                               config=_config(OTHER_STAGE[stage], dtype, world_size))
        path, client_state = engine.load_checkpoint(out)
        assert Path(path).name == f"global_step{SAVED_AT}"
        results[stage, dtype] = {"steps": engine.global_steps, "epoch": client_state["epoch"], "lr": engine.get_lr(),
                                 "losses": _train(engine, range(SAVED_AT, STEPS), rank, world_size)}
        engine.destroy()
    assert "deepspeed" not in {name.split(".")[0] for name, module in sys.modules.items() if module is not None}
    return results


def test_resume_from_deepspeed_checkpoints(run_ranks, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("deepspeed")
    pytest.importorskip("transformers")
    env = {"DS_ACCELERATOR": "cpu"}
    both = run_ranks(_deepspeed_then_zero, 2, str(tmp_path / "ds"), timeout=300, env=env)[0]
    alone = run_ranks(_zero_alone, 1, str(tmp_path / "ds"), str(tmp_path / "imported"), timeout=200, env=env)[0]
    for stage, dtype in CASES:
        reference = both["deepspeed", stage, dtype]
        assert reference["steps"] == SAVED_AT
        for where, ours in ((f"2 ranks, stage {stage}", both["zero", stage, dtype]),
                            (f"1 rank, stage {OTHER_STAGE[stage]}", alone[stage, dtype])):
            case = f"DeepSpeed stage {stage} {dtype} -> zero on {where}"
            assert ours["steps"] == SAVED_AT and ours["epoch"] == 1, case
            assert ours["lr"] == pytest.approx(reference["lr"], rel=1e-12), case
            torch.testing.assert_close(torch.tensor(ours["losses"]), torch.tensor(reference["losses"]),
                                       rtol=RTOL[dtype], atol=0.0, msg=lambda m, c=case: f"{c} losses: {m}")


# --- without DeepSpeed: a checkpoint in its format, made here, with what the run above does not have ---


def _fake_deepspeed(monkeypatch: pytest.MonkeyPatch) -> tuple[type, type]:
    """Stand-ins for DeepSpeed's loss scaler class and stage enum, under DeepSpeed's module names, so
    that pickles made here name them as DeepSpeed's own checkpoints do."""
    import enum
    import types

    class DynamicLossScaler:
        pass

    class ZeroStageEnum(int, enum.Enum):
        optimizer_states = 1
        gradients = 2
        weights = 3

    names = ("deepspeed", "deepspeed.runtime", "deepspeed.runtime.fp16", "deepspeed.runtime.fp16.loss_scaler",
             "deepspeed.runtime.zero", "deepspeed.runtime.zero.config")
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    for cls, module in ((DynamicLossScaler, names[3]), (ZeroStageEnum, names[5])):
        cls.__module__, cls.__qualname__ = module, cls.__name__
        setattr(sys.modules[module], cls.__name__, cls)
    return DynamicLossScaler, ZeroStageEnum


def _read_back(directory: Path) -> dict[str, Any]:
    import io

    from torch.distributed.checkpoint import load
    from torch.distributed.checkpoint.filesystem import FileSystemReader

    reader = FileSystemReader(directory)
    state: dict[str, Any] = {key: io.BytesIO() if key == "training" else torch.empty(meta.size, dtype=meta.properties.dtype)
                             for key, meta in reader.read_metadata().state_dict_metadata.items()}
    load(state, storage_reader=reader, no_dist=True)
    state["training"] = torch.load(state["training"], weights_only=False)
    return state


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_import_without_deepspeed_fp16_stage2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fp16 at stage 2 on 2 ranks: a dynamic loss scaler object, parameters padded to alignment and a last
    partition padded at its end, a frozen parameter and a buffer; imported while `import deepspeed` fails."""
    from collections import OrderedDict

    from zero_core.checkpoint._deepspeed import import_deepspeed_checkpoint
    from zero_core.checkpoint._describe import Description

    # The flat group: w (9 elements), 1 of alignment padding, b (5), 1 to make it 16: 8 per rank; rank 1's fp32
    # partition is saved without its last element, its state tensors with it. Padding holds NaN: never read.
    flat = torch.arange(16, dtype=torch.float32) / 16 + 1
    flat[9] = flat[15] = float("nan")
    w, b = flat[:9].reshape(3, 3), flat[10:15]
    module = {"w": w.half(), "b": b.half(), "frozen": torch.full((2, 2), 0.5, dtype=torch.half),
              "buf": torch.tensor([1, 2, 3])}
    tag_dir = tmp_path / "ds" / "global_step7"
    tag_dir.mkdir(parents=True)
    (tmp_path / "ds" / "latest").write_text("global_step7")
    with monkeypatch.context() as patch:
        scaler_class, stage_enum = _fake_deepspeed(patch)
        scaler = scaler_class()
        scaler.__dict__.update(cur_scale=1024.0, cur_iter=7, last_overflow_iter=2, cur_hysteresis=1, delayed_shift=2,
                               dynamic=True)
        torch.save({"module": module, "buffer_names": ["buf"], "optimizer": None,
                    "param_shapes": [OrderedDict(w=torch.Size([3, 3]), b=torch.Size([5]))],
                    "frozen_param_shapes": OrderedDict(frozen=torch.Size([2, 2])), "shared_params": {},
                    "frozen_param_fragments": OrderedDict(frozen=module["frozen"]),
                    "lr_scheduler": {"last_batch_iteration": 6}, "skipped_steps": 1, "global_steps": 7,
                    "global_samples": 28, "dp_world_size": 2, "mp_world_size": 1,
                    "ds_config": {"gradient_accumulation_steps": 2, "fp16": {"enabled": True}}, "ds_version": "0.19.8",
                    "epoch": 3}, tag_dir / "mp_rank_00_model_states.pt")
        for rank in range(2):
            part = flat[rank * 8 : (rank + 1) * 8]
            state = {"step": torch.tensor(6.0), "exp_avg": part * 2, "exp_avg_sq": part * 3}
            torch.save({"optimizer_state_dict": {
                "loss_scaler": scaler, "dynamic_loss_scale": True, "overflow": False, "clip_grad": 1.0,
                "base_optimizer_state": {"state": {0: state}, "param_groups": [{"lr": 0.5, "eps": 1e-6, "params": [0]}]},
                "single_partition_of_fp32_groups": [part[: 8 - rank]], "zero_stage": stage_enum.gradients,
                "group_paddings": [rank], "param_alignment_paddings": [[1, 0]], "partition_count": [2],
            }}, tag_dir / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # `import deepspeed` fails
    final = import_deepspeed_checkpoint(tmp_path / "ds", tmp_path / "zero")

    assert final == tmp_path / "zero" / "global_step7" and (tmp_path / "zero" / "latest").read_text() == "global_step7"
    description = Description.read(final)
    assert (description.world_size, description.stage, description.compute_dtype) == (2, 2, "float16")
    assert description.params == {"w": [3, 3], "b": [5], "frozen": [2, 2]}
    assert description.optimizer_state == ["exp_avg", "exp_avg_sq"]
    saved = _read_back(final)
    for name, values in (("w", w), ("b", b)):
        torch.testing.assert_close(saved[f"master.{name}"], values.reshape(-1), rtol=0, atol=0)
        torch.testing.assert_close(saved[f"optim.exp_avg.{name}"], values.reshape(-1) * 2, rtol=0, atol=0)
        torch.testing.assert_close(saved[f"optim.exp_avg_sq.{name}"], values.reshape(-1) * 3, rtol=0, atol=0)
        torch.testing.assert_close(saved[f"model.{name}"], values.reshape(-1).half(), rtol=0, atol=0)
    torch.testing.assert_close(saved["model.frozen"], module["frozen"].reshape(-1), rtol=0, atol=0)
    assert saved["buffer.buf"].tolist() == [1, 2, 3] and "master.frozen" not in saved
    training = saved["training"]
    assert training["counters"] == {"global_steps": 7, "global_samples": 28, "micro_steps": 14, "skipped_steps": 1}
    assert training["loss_scaler"] == {"cur_scale": 1024.0, "cur_hysteresis": 1, "cur_iter": 7, "last_overflow_iter": 2}
    assert training["param_groups"] == [{"lr": 0.5, "eps": 1e-6}] and training["optimizer_steps"] == [6.0]
    assert training["lr_scheduler"] == {"last_batch_iteration": 6} and training["client_state"] == {"epoch": 3}


def test_a_deepspeed_directory_without_weights_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Model states that name no parameter import as nothing: one error, not an empty checkpoint and rc 0."""
    from collections import OrderedDict

    from cli_helpers import run_main

    tag_dir = tmp_path / "ds" / "global_step1"
    tag_dir.mkdir(parents=True)
    with monkeypatch.context() as patch:
        _, stage_enum = _fake_deepspeed(patch)
        torch.save({"module": {}, "buffer_names": [], "param_shapes": [OrderedDict()],
                    "frozen_param_shapes": OrderedDict(), "shared_params": {}, "global_steps": 1,
                    "ds_config": {}}, tag_dir / "mp_rank_00_model_states.pt")
        torch.save({"optimizer_state_dict": {
            "base_optimizer_state": {"state": {}, "param_groups": [{"lr": 0.5, "params": [0]}]},
            "single_partition_of_fp32_groups": [torch.zeros(0)], "zero_stage": stage_enum.gradients,
            "group_paddings": [0], "partition_count": [1]}}, tag_dir / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    code, out, err = run_main(capsys, "checkpoint", "import", str(tag_dir), str(tmp_path / "zero"))
    assert (code, out) == (2, "") and "holds no weights" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "zero").exists() or not any((tmp_path / "zero").iterdir())
