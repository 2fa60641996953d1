"""`zero plan --verify`'s torch-free parts: the search order, each candidate's dry-run request, the cache, and
its refusals of bad input (one line, exit status 2). The traces themselves: tests/zero_core/test_plan_verify.py.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from cli_helpers import run_main, run_zero
from zero_estimate import Cluster, EstimateError, Limits, Training, from_preset
from zero_estimate._settings import ZeroSettings
from zero_estimate._verify import Budget, Outcome, Verdict, judge
from zero_estimate._verify_cache import VerifyCache, cache_dir, cache_key
from zero_estimate._verify_report import stage3_note
from zero_estimate._verify_request import RunSettings, dry_run_request
from zero_estimate._verify_search import SMALL_BUFFERS, levers, trials

GIB = 2**30
RUN = RunSettings("pythia-1.4b", None, 2, 24 * GIB, 900.0)


def test_levers_come_in_cost_order_each_adding_one_to_the_last():
    given = levers(Training(micro_batch=4, attention="eager"), ZeroSettings(stage=3, memory_efficient_linear=False))
    assert [lever.name for lever in given] == [
        "as given", "memory_efficient_linear", "sdpa attention", "smaller buckets", "micro-batch 2", "micro-batch 1"]
    last = given[-1]
    assert last.zero.memory_efficient_linear and last.training.attention == "sdpa"
    assert {key: getattr(last.zero, key) for key in SMALL_BUFFERS} == SMALL_BUFFERS
    assert (last.training.micro_batch, last.training.grad_accum) == (1, 4)  # the batch is kept
    assert [lever.name for lever in levers(Training(), ZeroSettings(reduce_bucket_size=1000, allgather_bucket_size=1000,
                                                                    stage3_prefetch_bucket_size=1000,
                                                                    stage3_max_live_parameters=1000))] == ["as given"]


def test_trials_are_the_formulas_fits_then_near_misses_each_configuration_once():
    model, cluster = from_preset("pythia-1.4b"), Cluster(4)
    limits = Limits(int(11.5 * GIB))

    def identity(candidate):  # type: ignore[no-untyped-def]
        return cache_key(dry_run_request(candidate.estimate, None, RUN), {})

    found = trials(model, cluster, limits, Training(seq_len=1024), ZeroSettings(), identity)
    assert len({identity(t.candidate) for t in found}) == len(found)
    as_given = [t for t in found if t.lever == "as given"]
    assert [(t.candidate.estimate.zero.stage, t.candidate.fits) for t in as_given] == [
        (2, True), (3, True), (2, True), (3, True), (3, True), (1, False)]
    assert as_given[-1].candidate.shortfall(limits) <= 0.15
    # the smaller buckets change stages 1-3 (stage 0 reduces in its gradient buffers all the same, but its
    # reduce_bucket_size is a key of its config): every configuration comes once
    assert [t.lever for t in found].count("smaller buckets") == 6


def test_a_candidates_request_has_only_the_keys_its_stage_reads():
    model, cluster = from_preset("pythia-1.4b"), Cluster(4)
    found = trials(model, cluster, Limits(80 * GIB), Training(seq_len=512, micro_batch=2), ZeroSettings(),
                   lambda c: cache_key(dry_run_request(c.estimate, None, RUN), {}))
    by_config = {(t.lever, t.candidate.estimate.zero.stage, t.candidate.estimate.zero.label()): t for t in found}
    stage2 = dry_run_request(by_config["smaller buckets", 2, "cpu/none"].candidate.estimate, None, RUN)
    assert stage2 == {
        "model": "pythia-1.4b", "nproc": 4, "micro_batch": 2, "seq_len": 512, "gradient_checkpointing": False,
        "lora_rank": None, "attention": "sdpa", "steps": 2, "device_memory": 24 * GIB, "timeout": 900.0,
        "ds_config": {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "bf16": {"enabled": True},
                      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                                            "reduce_bucket_size": 50_000_000, "allgather_bucket_size": 50_000_000},
                      "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1}}
    unpinned = replace(by_config["as given", 3, "cpu/cpu"].candidate.estimate, zero=replace(
        by_config["as given", 3, "cpu/cpu"].candidate.estimate.zero, pin_memory=False))
    assert dry_run_request(unpinned, None, RUN)["ds_config"]["zero_optimization"] == {
        "stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": False},
        "offload_param": {"device": "cpu", "pin_memory": False}}
    given = {"fp16": {"enabled": True}, "train_batch_size": 64,
             "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "memory_efficient_linear": False}}
    stage3 = dry_run_request(by_config["as given", 3, "none/none"].candidate.estimate, given, RUN)["ds_config"]
    # the given config's keys the candidate sets are replaced, its offload block left out, train_batch_size
    # dropped, and the optimizer its script would pass put in
    assert stage3 == {"fp16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                      "zero_optimization": {"stage": 3, "memory_efficient_linear": True},
                      "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1}


def test_the_cache_keeps_a_measurement_whole_and_refuses_a_link_or_a_damaged_file(tmp_path: Path):
    cache = VerifyCache(tmp_path / "plan-verify")
    measured = {"gpu_peak": 5, "gpu_peak_phase": "backward", "ranks": {"0": 5}, "categories": {"activations": 5},
                "host_peak": 7, "seconds": 1.5}
    key = cache_key({"nproc": 2, "ds_config": {}}, {"model_type": "gpt_neox"})
    assert cache.get(key) is None
    cache.put(key, measured)
    assert cache.get(key) == measured
    assert sorted(p.name for p in (tmp_path / "plan-verify").iterdir()) == [f"{key}.json"]  # no staging file left
    # the key follows the model's config, the request (not where the model's file is) and the versions
    assert cache_key({"nproc": 4, "ds_config": {}}, {"model_type": "gpt_neox"}) != key
    assert cache_key({"nproc": 2, "ds_config": {}}, {"model_type": "llama"}) != key
    assert cache_key({"nproc": 2, "ds_config": {}, "model": "elsewhere.json", "timeout": 5}, {"model_type": "gpt_neox"}) == key
    path = tmp_path / "plan-verify" / f"{key}.json"
    path.write_text(json.dumps({"key": key, "measured": {**measured, "gpu_peak": "5"}}))
    with pytest.raises(EstimateError, match=r"measured.gpu_peak is missing or not a whole number; delete it"):
        cache.get(key)
    path.unlink()
    os.symlink(tmp_path / "elsewhere.json", path)
    with pytest.raises(EstimateError, match="is a symbolic link, which zero never writes; delete it"):
        cache.get(key)
    path.unlink()
    os.rename(tmp_path / "plan-verify", tmp_path / "real")
    os.symlink(tmp_path / "real", tmp_path / "plan-verify")
    with pytest.raises(EstimateError, match="cache folder .* is a symbolic link; point ZERO_PLAN_VERIFY_CACHE at"):
        cache.put(key, measured)


def test_the_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("ZERO_PLAN_VERIFY_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "zero" / "plan-verify"
    monkeypatch.setenv("ZERO_PLAN_VERIFY_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


BAD_INPUT = {
    "headroom out of range": (["--preset", "pythia-1.4b", "--headroom", "0.75"],
                              "zero: error: --headroom: 0.75 is out of range; pass 0 to 0.5 (or 0% to 50%)"),
    "headroom not a number": (["--preset", "pythia-1.4b", "--headroom", "lots"],
                              "zero: error: --headroom: 'lots' is not a fraction; pass e.g. 0.1 or 10%"),
    "unknown preset": (["--preset", "pythia-9b"], "zero: error: --preset: unknown preset 'pythia-9b'; did you mean 'pythia-6.9b'?"),
    "not a causal language model": (["--preset", "t5-3b"],
                                    "zero: error: --verify: the dry run builds causal language models; 't5-3b' is not "
                                    "one"),
    "a model of numbers": (["--params", "7B"], "zero: error: --verify: the dry run builds the model from its config; "
                                                "pass --preset or --config, not --params"),
    "selective checkpointing": (["--preset", "pythia-1.4b", "--checkpointing", "selective"],
                                "zero: error: --verify: the dry run checkpoints every layer or none"),
    "LoRA on some layers": (["--preset", "pythia-1.4b", "--lora-rank", "8", "--lora-targets", "query_key_value"],
                            "zero: error: --verify: the dry run adapts every linear layer of the blocks (all-linear); "
                            "leave out --lora-targets"),
    "verify count": (["--preset", "pythia-1.4b", "--verify-count", "0"],
                     "zero: error: --verify-count: 0 is out of range; pass 1 to 100"),
}


@pytest.mark.parametrize("name", list(BAD_INPUT))
def test_bad_input_is_one_line_and_exit_status_2(capsys: pytest.CaptureFixture[str], name: str):
    args, message = BAD_INPUT[name]
    code, out, err = run_main(capsys, "plan", "--verify", "--gpu-memory", "24GiB", *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith(message), err


def test_a_refusal_imports_no_torch():
    done = run_zero("plan", "--verify", "--preset", "pythia-1.4b", "--gpu-memory", "24GiB", "--headroom", "2",
                    python_flags=("-X", "importtime"))
    assert done.returncode == 2
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "zero_estimate._verify_cli" in imported
    assert not [name for name in imported if name.split(".")[0] == "torch"]  # zero-core's commands load, not torch


def test_a_flag_of_verify_without_it_is_refused(capsys: pytest.CaptureFixture[str]):
    code, out, err = run_main(capsys, "plan", "--gpu-memory", "24GiB", "--preset", "pythia-1.4b", "--headroom", "0.2")
    assert (code, out, err) == (2, "", "zero: error: --headroom: goes with --verify; add --verify, or leave it out\n")


def test_verify_without_zero_core_says_to_install_it():
    done = run_zero("plan", "--verify", "--preset", "pythia-1.4b", "--gpu-memory", "24GiB",
                    ZERO_DISABLE_PLUGINS="core")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        "zero: error: --verify: needs zero-core, whose dry run traces each configuration (it implements the "
        "zero_verify_candidate hook); install it: pip install zero-core (or pip install -e packages/zero-core)")


def test_a_trace_is_judged_against_the_gpu_less_its_headroom_and_host_memory_per_node():
    measured = {"gpu_peak": 22 * GIB, "gpu_peak_phase": "backward", "host_peak": 10 * GIB}
    budget = Budget(Limits(24 * GIB, cpu_memory=32 * GIB), 0.10)
    assert budget.gpu == int(21.6 * GIB)
    assert judge(measured, budget, gpus_per_node=4) == (Verdict.OVER, (
        "GPU peak 22.00 GiB (backward) is 409.6 MiB over 24.00 GiB less 10% headroom = 21.60 GiB; "
        "host memory 40.00 GiB per node is 8.00 GiB over 32.00 GiB"))
    assert judge(measured, Budget(Limits(24 * GIB, cpu_memory=40 * GIB), 0.05), gpus_per_node=4) == (
        Verdict.FITS, "GPU peak 22.00 GiB (backward), 819.2 MiB under 24.00 GiB less 5% headroom = 22.80 GiB")


def test_stage_3s_note_names_the_held_weights_and_the_formula_the_other_way():
    zero = ZeroSettings(stage=3, memory_efficient_linear=False)
    found = trials(from_preset("pythia-1.4b"), Cluster(4), Limits(80 * GIB), Training(seq_len=1024), zero,
                   lambda c: cache_key(dry_run_request(c.estimate, None, RUN), {}))
    trial = next(t for t in found if t.candidate.estimate.zero.stage == 3)
    assert not trial.candidate.estimate.zero.memory_efficient_linear
    measured = {"gpu_peak": 9 * GIB, "gpu_peak_phase": "backward", "host_peak": 0,
                "categories": {"param.gathered.held": 3 * GIB, "activations": 5 * GIB, "param.partition": GIB}}
    outcome = Outcome(trial, {}, Verdict.FITS, "", measured, 1.0, False)
    assert stage3_note(outcome) == (
        "fits with peak 9.00 GiB in backward: activations 5.00 GiB, param.gathered.held 3.00 GiB, param.partition "
        "1.00 GiB; held weights (param.gathered.held) 3.00 GiB with memory_efficient_linear off (autograd keeps "
        "each gathered weight for backward); with it on the formula puts the peak at 6.03 GiB (backward), held "
        "weights 0.0 MiB")


def test_a_cache_folder_that_is_a_link_is_refused_before_anything_is_traced(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    monkeypatch.setenv("ZERO_PLAN_VERIFY_CACHE", str(tmp_path / "link"))
    code, out, err = run_main(capsys, "plan", "--verify", "--preset", "pythia-1.4b", "--gpu-memory", "24GiB")
    assert (code, out) == (2, "")
    assert err == (f"zero: error: --verify: the plan-verify cache folder {tmp_path / 'link'} is a symbolic link; "
                   "point ZERO_PLAN_VERIFY_CACHE at a real folder, or pass --no-cache\n")
