"""Faults on 2 gloo ranks, each ending within a bound the test states (none relies on gloo's 30-minute default):
a NaN batch on one rank (bf16, fp16, fp32), runs that skip every step, mismatched models and configs, a rank
killed mid-step, a stalled rank under ZERO_COLLECTIVE_TIMEOUT, and an exception raised inside backward.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import torch

from engine_helpers import WarningRecords
from multirank import run_ranks, started_ranks

IN, OUT = 8, 4


def _model(layers: int = 2, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    blocks: list[torch.nn.Module] = []
    for index in range(layers):
        blocks += [torch.nn.Linear(IN, IN if index < layers - 1 else OUT), torch.nn.ReLU()]
    return torch.nn.Sequential(*blocks[:-1]).to(dtype)


def _config(stage: int = 2, precision: str = "fp32", **top: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_clipping": 0.0,
        "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
        "zero_optimization": {"stage": stage, "reduce_bucket_size": 16},
        "bf16": {"enabled": precision == "bf16"},
        "fp16": {"enabled": precision == "fp16", "initial_scale_power": 4},
    }
    config.update(top)
    return config


def _batch(rank: int, step: int, dtype: torch.dtype, poisoned: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(100 * step + rank)
    x = torch.randn(2, IN, generator=generator).to(dtype)
    if poisoned:
        x[0, 0] = float("nan")
    return x, torch.randn(2, OUT, generator=generator).to(dtype)


def _train_step(engine: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    loss = torch.nn.functional.mse_loss(engine(x).float(), y.float())
    engine.backward(loss)
    engine.step()


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _nan_on_rank1(rank: int, world_size: int, precision: str, stage: int) -> dict[str, Any]:
    import zero_core

    records = WarningRecords()
    logging.getLogger("zero_core.engine").addHandler(records)
    dtype = DTYPES[precision]
    engine, _, _, _ = zero_core.initialize(model=_model(), config=_config(stage, precision))
    _train_step(engine, *_batch(rank, 0, dtype))
    before = {k: v.clone() for k, v in engine.module_state_dict().items()}
    scale = engine.optimizer.loss_scale
    _train_step(engine, *_batch(rank, 1, dtype, poisoned=rank == 1))
    after_skip = engine.module_state_dict()
    result = {"applied": engine.was_step_applied(), "skipped": engine.skipped_steps, "warnings": records.messages,
              "unchanged": all(torch.equal(before[k], after_skip[k]) for k in before) if rank == 0 else None,
              "scales": (scale, engine.optimizer.loss_scale)}
    _train_step(engine, *_batch(rank, 2, dtype))
    result["applied_after"] = engine.was_step_applied()
    result["finite_after"] = all(torch.isfinite(p).all() for p in engine.module.parameters())
    engine.destroy()
    logging.getLogger("zero_core.engine").removeHandler(records)
    return result


PRECISIONS, STAGES = ("fp32", "bf16", "fp16"), (0, 2, 3)


def _nan_cases(rank: int, world_size: int) -> dict[str, Any]:
    return {f"{precision}/{stage}": _nan_on_rank1(rank, world_size, precision, stage)
            for precision in PRECISIONS for stage in STAGES}


@pytest.fixture(scope="module")
def nan_runs() -> list[dict[str, Any]]:
    start = time.monotonic()
    results = run_ranks(_nan_cases, 2, timeout=120)
    assert time.monotonic() - start < 120
    return results


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("stage", STAGES)
def test_a_nan_batch_on_one_rank_skips_the_step_on_every_rank(nan_runs: list[dict[str, Any]], precision: str,
                                                             stage: int) -> None:
    results = [per_rank[f"{precision}/{stage}"] for per_rank in nan_runs]
    for rank, result in enumerate(results):
        assert result["applied"] is False and result["skipped"] == 1, (rank, result)
        assert result["applied_after"] and result["finite_after"], "training goes on with finite weights"
        assert len(result["warnings"]) == 1, result["warnings"]
        (warning,) = result["warnings"]
        assert warning.startswith("step 2: gradients are non-finite (inf or NaN); the optimizer step was skipped "
                                  "on every rank, weights were not updated")
        assert warning.endswith("(1 skipped so far, 1 in a row)")
        if precision == "fp16":
            assert "loss scale 16 -> 16" in warning  # hysteresis 2: the first overflow keeps the scale
    assert results[0]["unchanged"], "the weights are untouched by the skipped step"


LIMITS: list[tuple[dict[str, int], int, str]] = [
    ({}, 10, "none of the first 10 steps could be applied (non_finite_steps.max_initial)"),
    ({"max_initial": 3}, 3, "none of the first 3 steps"),
    ({"max_initial": 0, "max_consecutive": 5}, 5, "non_finite_steps.max_consecutive is 5"),
]


def _always_nan(rank: int, world_size: int) -> list[str]:
    import zero_core

    messages = []
    for limits, _, _ in LIMITS:
        engine, _, _, _ = zero_core.initialize(model=_model(), config=_config(non_finite_steps=limits))
        message = "never raised"
        for step in range(20):
            try:
                _train_step(engine, *_batch(rank, step, torch.float32, poisoned=True))
            except zero_core.NonFiniteStepsError as error:
                message = f"step {step + 1}: {error}"
                break
        engine.destroy()
        messages.append(message)
    return messages


def test_a_run_that_skips_every_step_stops_with_a_clear_error() -> None:
    for messages in run_ranks(_always_nan, 2, timeout=60):
        for (_, raised_at, words), message in zip(LIMITS, messages):
            assert message.startswith(f"step {raised_at}: step {raised_at}: gradients are non-finite"), message
            assert words in message


MISMATCHES = {
    "layers": "the ranks' models differ (ranks [1] differ from rank 0): parameter 2: rank 0 has 2.weight (4, 8) "
              "float32, rank 1 has 2.weight (8, 8) float32 (4 against 6 parameters)",
    "dtype": "parameter 0: rank 0 has 0.weight (8, 8) float32, rank 1 has 0.weight (8, 8) float64",
    "frozen": "parameter 1: rank 0 has 0.bias (8,) float32, rank 1 has 0.bias (8,) float32 frozen",
    "stage": "the ranks' configs differ (ranks [1] differ from rank 0): zero_optimization.overlap_comm is False on "
             "rank 0 and True on rank 1, zero_optimization.stage is 2 on rank 0 and 3 on rank 1",
    "bucket": "zero_optimization.reduce_bucket_size is 16 on rank 0 and 32 on rank 1",
}


def _mismatched(rank: int, world_size: int) -> dict[str, str]:
    import zero_core

    messages = {}
    for case in MISMATCHES:
        model = _model(layers=3 if case == "layers" and rank == 1 else 2,
                       dtype=torch.float64 if case == "dtype" and rank == 1 else torch.float32)
        config = _config(stage=3 if case == "stage" and rank == 1 else 2)
        if case == "bucket" and rank == 1:
            config["zero_optimization"]["reduce_bucket_size"] = 32
        if case == "frozen" and rank == 1:
            model[0].bias.requires_grad_(False)
        try:
            zero_core.initialize(model=model, config=config)
            messages[case] = "no error"
        except zero_core.RankMismatch as error:
            messages[case] = str(error)
    return messages


def test_mismatched_models_and_configs_fail_on_every_rank_within_seconds() -> None:
    start = time.monotonic()
    per_rank = run_ranks(_mismatched, 2, timeout=60)
    for case, words in MISMATCHES.items():
        assert per_rank[0][case] == per_rank[1][case] and words in per_rank[0][case], (case, per_rank[0][case])
    assert time.monotonic() - start < 40


def _mismatched_under_init(rank: int, world_size: int) -> dict[str, str]:
    import zero_core

    messages = {}
    config = _config(stage=3)
    config["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    for case, layers in (("fewer layers", 2 if rank == 1 else 3), ("wider", 3)):
        try:
            with zero_core.Init(config_dict_or_path=config):
                if case == "wider" and rank == 1:
                    torch.nn.Sequential(torch.nn.Linear(IN, 2 * IN), torch.nn.Linear(2 * IN, OUT))
                else:
                    _model(layers=layers)
            messages[case] = "no error"
        except zero_core.RankMismatch as error:
            messages[case] = str(error)
    return messages


def test_mismatched_models_under_init_fail_on_every_rank() -> None:
    per_rank = run_ranks(_mismatched_under_init, 2, timeout=60)
    fewer = per_rank[0]["fewer layers"]
    assert fewer == per_rank[1]["fewer layers"]
    assert fewer.startswith("zero_core.Init: the ranks built different models (ranks [1] differ from rank 0): "
                            "rank 0 was at unit 1 (Linear: (8, 8) float32, (8,) float32), rank 1 at unit 1 "
                            "(Linear: (4, 8) float32, (4,) float32)"), fewer
    wider = per_rank[0]["wider"]
    assert "rank 0 was at unit 0 (Linear: (8, 8) float32, (8,) float32), rank 1 at unit 0 (Linear: (16, 8) float32" \
        in wider, wider


def _killed_mid_step(rank: int, world_size: int) -> None:
    import zero_core

    engine, _, _, _ = zero_core.initialize(model=_model(), config=_config())
    _train_step(engine, *_batch(rank, 0, torch.float32))
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    _train_step(engine, *_batch(rank, 1, torch.float32))


def _stalled(rank: int, world_size: int) -> None:
    import zero_core

    engine, _, _, _ = zero_core.initialize(model=_model(), config=_config())
    if rank == 1:
        time.sleep(120)
    _train_step(engine, *_batch(rank, 0, torch.float32))


def _raises_in_backward(rank: int, world_size: int) -> None:
    import zero_core

    model = _model(layers=4)
    engine, _, _, _ = zero_core.initialize(model=model, config=_config(stage=2))
    if rank == 1:
        def fail(grad: torch.Tensor) -> torch.Tensor:
            raise ValueError("boom in a backward hook on rank 1")
        engine.module[2].weight.register_hook(fail)  # mid-backward: later layers' buckets are already launched
    _train_step(engine, *_batch(rank, 0, torch.float32))


def _outcome(fn: Any, timeout: float, env: dict[str, str] | None = None,
             watched: tuple[int, ...] = (0, 1)) -> tuple[list[int | None], list[str], float]:
    """Run `fn` on 2 ranks until the `watched` ones have exited (or `timeout`); each rank's exit code and error."""
    start = time.monotonic()
    with started_ranks(fn, 2, env=env) as (processes, out):
        while time.monotonic() - start < timeout and any(processes[r].exitcode is None for r in watched):
            time.sleep(0.1)
        codes = [p.exitcode for p in processes]
        errors = [(out / f"{r}.error").read_text() if (out / f"{r}.error").exists() else "" for r in range(2)]
    return codes, errors, time.monotonic() - start


def test_a_rank_killed_mid_step_leaves_the_survivor_an_error_naming_it() -> None:
    codes, errors, took = _outcome(_killed_mid_step, 60, {"ZERO_COLLECTIVE_TIMEOUT": "30"})
    assert codes == [1, -signal.SIGKILL], (codes, errors)
    assert "CollectiveFailed: rank 0:" in errors[0] and "at step 2 backward" in errors[0]
    assert "rank(s) [1]" in errors[0], errors[0]
    assert took < 45


def test_a_stalled_rank_ends_in_a_timeout_naming_it() -> None:
    # 10 s: ranks fork from a server that has torch imported, so both reach initialize within a second.
    codes, errors, took = _outcome(_stalled, 60, {"ZERO_COLLECTIVE_TIMEOUT": "10"}, watched=(0,))
    assert codes[0] == 1, (codes, errors)
    assert "did not complete in time, waiting on rank(s) [1]" in errors[0], errors[0]
    assert "rank 1 was last seen at initialize" in errors[0]
    assert 10 <= took < 40


@pytest.mark.parametrize("attempt", range(3))
def test_an_exception_in_backward_ends_the_rank_with_it_and_its_peer_with_an_error(attempt: int) -> None:
    codes, errors, took = _outcome(_raises_in_backward, 60, {"ZERO_COLLECTIVE_TIMEOUT": "30"})
    assert codes == [1, 1], (codes, errors)  # never SIGABRT (-6)
    assert "ValueError: boom in a backward hook on rank 1" in errors[1]
    assert "CollectiveFailed" in errors[0] and "rank 1 failed in backward at step 1: ValueError: boom" in errors[0], \
        errors[0]
    assert took < 45


def test_a_bad_timeout_variable_is_one_line() -> None:
    env = {**os.environ, "ZERO_COLLECTIVE_TIMEOUT": "soon", "RANK": "0", "WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}
    code = ("import torch, zero_core\n"
            "zero_core.initialize(model=torch.nn.Linear(2, 2), config={'train_micro_batch_size_per_gpu': 1})")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "ZERO_COLLECTIVE_TIMEOUT='soon': not a positive number of seconds" in done.stderr


# --- swap files changed between steps (issue 33, item 5): read back, checked, refused ---

# kind -> (the category folder of the file changed, its first file's slot, the bytes of that slot's values)
SWAPPED = {
    "optimizer": ("optim.master", "group0.bucket0.sub0", 4 * (IN * IN + IN + IN * OUT + OUT)),  # the fp32 master
    "param": ("param.partition", "group0.0", 2 * (IN * IN + IN)),  # the first Linear's bf16 partition
}


def _nvme_config(root: str, kind: str) -> dict[str, Any]:
    nvme = {"device": "nvme", "nvme_path": root, "buffer_count": 4}
    zero: dict[str, Any] = {"stage": 3 if kind == "param" else 2, "offload_optimizer": nvme}
    if kind == "param":
        zero["offload_param"] = {**nvme, "buffer_count": 3, "buffer_size": 4096, "max_in_cpu": 0}
        zero["stage3_param_persistence_threshold"] = 0
    return _config(precision="bf16" if kind == "param" else "fp32", zero_optimization=zero,
                   optimizer={"type": "AdamW", "params": {"lr": 1e-3}})


@pytest.mark.usefixtures("solo_process_group")
@pytest.mark.parametrize("kind", list(SWAPPED))
def test_a_swap_file_changed_between_steps_stops_training_naming_it(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                                    kind: str) -> None:
    import zlib

    import zero_core
    from zero_offload.swap import SwapError, SwapIntegrityError

    monkeypatch.setenv("ZERO_SWAP_BUFFERED", "1")  # any file system: the check is the same as with O_DIRECT
    dtype = torch.bfloat16 if kind == "param" else torch.float32
    engine = zero_core.initialize(model=_model(dtype=dtype), config=_nvme_config(str(tmp_path), kind))[0]
    x, y = _batch(0, 0, dtype)
    _train_step(engine, x, y)
    folder, slot, nbytes = SWAPPED[kind]
    (rank,) = tmp_path.glob("zero-run-*/rank0")
    victim = rank / folder / f"{slot}.swp"
    data = bytearray(victim.read_bytes())
    written = zlib.crc32(bytes(data[:nbytes]))
    data[0:4] = bytes(b ^ 0xFF for b in data[0:4])  # another process's write into the file, between steps
    victim.write_bytes(bytes(data))
    with pytest.raises(SwapIntegrityError) as caught:
        _train_step(engine, x, y)
    assert str(caught.value) == (
        f"swap file {victim} (slot {slot}, {nbytes} bytes at offset 0) was changed outside zero: its bytes read back "
        f"have CRC-32 {zlib.crc32(bytes(data[:nbytes])):#010x}, zero wrote CRC-32 {written:#010x}. Training stops "
        "rather than step from state that is not what was saved; no other process may write under this run's "
        "zero-run-<id> directory in nvme_path (resume from the last checkpoint)")
    if kind == "optimizer":  # it failed inside the step: the engine refuses the half-updated weights first
        with pytest.raises(zero_core.HalfAppliedStep, match=r"step 2 failed after it had updated some parameters "
                                                            r"\(SwapIntegrityError: swap file "):
            _train_step(engine, x, y)
    else:
        with pytest.raises(SwapError, match="is unusable after an earlier failed transfer"):
            _train_step(engine, x, y)  # nothing more is read from the run's swap files
    engine.destroy()
