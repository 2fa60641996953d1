"""`zero profile --dry-run`: the engine traced on fake tensors, held to a real run of the same settings.

Each case runs `zero profile` twice with the same arguments, once launching 2 real ranks (the CPU allocator's
count is the ruler) and once with `--dry-run --device cpu` (one process, fake tensors, the fake allocator is the
ruler), and holds every phase's allocator peak of every setting to 2%: stages 0 to 3, full and LoRA,
`offload_optimizer: cpu`, activation checkpointing. Then what a dry run adds: its JSON field, a CUDA target
(512-byte blocks, torch's foreach step), ranks beyond this machine, and its refusals; and a step that did not
happen in the micro-steps run.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_zero
from zero_core.profile import profile_text

PHASES = ["init", "forward", "backward", "step"]
# overlap_comm as DeepSpeed defaults it (off at stages 0-2, on at stage 3): on gloo a reduce-scatter's copy of its
# input is ours, made at the launch and freed at the wait, in a real run and a dry run alike (comm/_gloo.py).
CONFIGS = {
    "plain": {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
              "zero_optimization": {"stage": 2}},
    "offloaded": {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                  "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                        "reduce_bucket_size": 2000000, "stage3_param_persistence_threshold": 10000}},
}
CASES = {
    "full, stages 0 to 3": ["--stages", "0,1,2,3", "--ds-config", "plain"],
    "LoRA, offload_optimizer cpu, activation checkpointing, stages 2 and 3": [
        "--stages", "2,3", "--memory-efficient-linear", "both", "--lora-rank", "4", "--gradient-checkpointing",
        "--ds-config", "offloaded"],
    # tied embeddings (the LM head's weight is the embedding's: the meta model's ties must survive its fake
    # storage) and grouped-query attention, through torch's flash kernel for CPU
    "tied embeddings, stages 2 and 3": ["--model", "qwen2-tiny", "--stages", "2,3", "--ds-config", "plain"],
}


def _profile(folder: Path, args: list[str], *extra: str) -> dict[str, Any]:
    for name, config in CONFIGS.items():
        (folder / f"{name}.json").write_text(json.dumps(config))
    args = [str(folder / f"{arg}.json") if arg in CONFIGS else arg for arg in args]
    model_given = [] if "--model" in args else ["--model", "pythia-tiny"]
    done = run_zero("profile", *model_given, "--seq-len", "64", "--steps", "2", "--micro-batch", "2",
                    *args, *extra, "--json", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.fixture(scope="module", params=list(CASES))
def real_and_dry(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    folder = tmp_path_factory.mktemp("dry")
    args = CASES[request.param]
    return _profile(folder, args), _profile(folder, args, "--dry-run", "--device", "cpu")


def test_every_phase_of_a_dry_run_is_within_2_percent_of_the_real_run(
        real_and_dry: tuple[dict[str, Any], dict[str, Any]]) -> None:
    real, dry = real_and_dry
    assert [s["label"] for s in dry["settings"]] == [s["label"] for s in real["settings"]]
    for measured, traced in zip(real["settings"], dry["settings"]):
        # A real run's peaks are the same every run (tests/integration/test_same_bytes_every_run.py), so the dry
        # run is held to 2% of them, nothing more allowed for.
        for phase in PHASES:
            allocator = measured["phases"][phase]["allocator"]["allocator"]
            faked = traced["phases"][phase]["allocator"]["allocator"]
            assert 0.98 * allocator <= faked <= 1.02 * allocator, (measured["label"], phase, faked, allocator)
            # the ledger explains the fake allocator as it explains the real one
            counted = traced["phases"][phase]["allocator"]
            assert 0 <= counted["untracked"] <= 0.05 * counted["allocator"], (measured["label"], phase, counted)


def test_a_dry_run_has_the_real_schema_and_says_what_it_modelled(
        real_and_dry: tuple[dict[str, Any], dict[str, Any]]) -> None:
    real, dry = real_and_dry
    assert real["dry_run"] is None
    assert set(dry) == set(real) and dry["schema_version"] == real["schema_version"] == 4
    for measured, traced in zip(real["settings"], dry["settings"]):
        assert set(traced) == set(measured) and traced["device"] == "cpu"
        assert traced["ruler"].startswith("dry run: fake cpu storages")
        assert len(traced["ranks"]) == 2, "rank 0 and the last rank are traced"
    assert dry["dry_run"]["device"] == "cpu" and dry["dry_run"]["traced_ranks"] == [0, 1]
    assert not any("gloo" in what for what in dry["dry_run"]["modelled"]), "gloo's copies are traced, not modelled"
    assert "modelled, not traced" in profile_text(dry)


def test_a_cuda_target_counts_512_byte_blocks_for_ranks_this_machine_does_not_have(tmp_path: Path) -> None:
    report = _profile(tmp_path, ["--stages", "2,3", "--nproc", "64", "--lora-rank", "4", "--memory-efficient-linear",
                                 "both"], "--dry-run")
    assert report["nproc"] == 64 and report["dry_run"]["traced_ranks"] == [0, 63]
    assert report["dry_run"]["device"] == "cuda" and report["dry_run"]["device_memory"] == 80 << 30
    stage2, held, efficient = report["settings"]
    for setting in report["settings"]:
        assert setting["device"] == "cuda" and "512-byte blocks" in setting["ruler"]
        for phase in setting["phases"].values():
            assert phase["allocator"]["allocator"] % 512 == 0, "the caching allocator's blocks"
            assert 0 <= phase["allocator"]["untracked"] < 0.05 * phase["allocator"]["allocator"]
    assert held["peak"]["measured"]["bytes"] > efficient["peak"]["measured"]["bytes"], \
        "stage 3 holds the gathered weights unless memory_efficient_linear"
    assert stage2["phases"]["init"]["measured_total"] > held["phases"]["init"]["measured_total"], "64 partitions"
    text = profile_text(report)
    assert "stage 3, memory_efficient_linear false: peak" in text and "stage 2's; it holds" in text
    assert text.count("fits: the peak is") == 3 and "of the device's 81920.00 MiB" in text
    report["dry_run"]["device_memory"] = 1 << 20  # 1 MiB: nothing fits
    assert profile_text(report).count("does not fit: the peak is") == 3
    assert "param.gathered.held" in text and "stage 3, memory_efficient_linear true: peak" in text


def test_a_cuda_target_steps_with_foreach_and_counts_its_temporaries(tmp_path: Path) -> None:
    (tmp_path / "fused.json").write_text(json.dumps(
        {**CONFIGS["plain"], "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "fused": True}}}))
    cuda, = _profile(tmp_path, ["--stages", "2", "--ds-config", "plain"], "--dry-run")["settings"]
    cpu, = _profile(tmp_path, ["--stages", "2", "--ds-config", "plain"], "--dry-run", "--device", "cpu")["settings"]
    fused, = _profile(tmp_path, ["--stages", "2", "--ds-config", str(tmp_path / "fused.json")], "--dry-run")["settings"]
    assert (cuda["optimizer_kernel"], cpu["optimizer_kernel"], fused["optimizer_kernel"]) == \
        ("foreach", "single-tensor", "fused")
    at_cuda, at_cpu = cuda["phases"]["step"]["measured"], cpu["phases"]["step"]["measured"]
    # foreach: sqrt(v) of every master tensor at once, each the master tensor's shape in fp32 and so its blocks
    assert at_cuda["other"] == at_cuda["optim.master"] > 0
    # single-tensor over stage 2's one master tensor: its sqrt(v) and the quotient
    assert at_cpu["other"] == 2 * at_cpu["optim.master"] > 0
    assert "other" not in fused["phases"]["step"]["measured"], "fused kernels make no parameter-sized temporaries"
    for setting in (cuda, cpu, fused):  # the estimate steps the same way
        step = setting["phases"]["step"]
        assert step["estimated"].get("other", 0) == step["measured"].get("other", 0)
        assert not [gap for gap in setting["gaps"] if gap["phase"] == "step"]
    text = profile_text(_profile(tmp_path, ["--stages", "2", "--ds-config", "plain"], "--dry-run"))
    assert "ruler: dry run: fake cuda storages counted as the CUDA caching allocator's 512-byte blocks; optimizer " \
           "step: foreach)" in text


def test_a_step_that_did_not_happen_says_so_instead_of_zero(tmp_path: Path) -> None:
    (tmp_path / "accumulating.json").write_text(json.dumps({**CONFIGS["plain"], "gradient_accumulation_steps": 16}))
    done = run_zero("profile", "--model", "pythia-tiny", "--seq-len", "64", "--steps", "1", "--micro-batch", "2",
                    "--stages", "2", "--ds-config", str(tmp_path / "accumulating.json"), "--dry-run", "--device",
                    "cpu", "--json", "--html", str(tmp_path / "report.html"), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    setting, = report["settings"]
    reason = "no optimizer step in 1 micro-step at gradient_accumulation_steps 16"
    step = setting["phases"]["step"]
    assert step["absent"] == reason and [setting["phases"][p]["absent"] for p in PHASES[:3]] == [None] * 3
    assert step["measured"] is step["allocator"] is step["measured_total"] is step["allocator_error"] is None
    assert step["estimated_at_allocator"] > 0, "the estimate of the step stands alone"
    assert setting["peak"]["measured"]["phase"] == setting["peak"]["estimated"]["phase"] == "backward"
    assert "step" not in setting["host"] and not [gap for gap in setting["gaps"] if gap["phase"] == "step"]
    text = profile_text(report)
    assert f"step: not measured: {reason}" in text and "peak: measured" in text
    step_row, = [line for line in text.splitlines() if line.startswith("step  ")]
    assert step_row.split()[:6] == ["step", "-", "-", "-", "n/a", f"{step['estimated_at_allocator'] / 2**20:.2f}"]
    assert f"step not measured: {reason}" in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize("args, message", [
    (["--device", "cuda"], "--device and --device-memory describe the device a dry run stands for; add --dry-run"),
    (["--dry-run", "--nproc", "70000"], "--nproc 70000 is out of range; pass 1 to 65536"),
    (["--dry-run", "--device-memory", "0"], "--device-memory 0 is out of range; pass 0.125 to 1.04858e+06 GiB"),
    (["--nproc", "9"], "--nproc 9 is out of range; pass 1 to 8"),
])
def test_bad_dry_run_arguments_are_one_line(args: list[str], message: str) -> None:
    done = run_zero("profile", "--model", "pythia-tiny", *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_nvme_offload_is_refused_with_the_reason(tmp_path: Path) -> None:
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme",
                                                                                        "nvme_path": str(tmp_path)}}}))
    done = run_zero("profile", "--model", "pythia-tiny", "--dry-run", "--ds-config", str(config))
    assert done.returncode == 2, done.stderr
    assert "zero_optimization.offload_param.device is nvme" in done.stderr, done.stderr


def test_a_cuda_target_offloads_to_pinned_host_memory_and_checkpoints(tmp_path: Path) -> None:
    config = tmp_path / "offload.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                                  "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
                                                        "offload_optimizer": {"device": "cpu", "pin_memory": True}}}))
    report = _profile(tmp_path, ["--stages", "3", "--nproc", "8", "--gradient-checkpointing", "--ds-config",
                                 str(config)], "--dry-run")
    setting, = report["settings"]
    host = setting["host"]["step"]
    assert host["host"]["optim.master"] > 0 and host["host"]["optim.state"] > 0, "the optimizer lives on the host"
    assert host["host.pinned"]["param.partition"] > 0 and host["host.pinned"]["grad.partition"] > 0, \
        "the offloaded partitions are pinned (modelled)"
    assert "optim.state" not in setting["phases"]["step"]["measured"], "nothing of the optimizer stays on the device"
    assert any("pinned host memory" in what for what in report["dry_run"]["modelled"])


def test_a_dry_run_stops_at_the_timeout_with_the_fix() -> None:
    done = run_zero("profile", "--model", "pythia-tiny", "--dry-run", "--stages", "0,1,2,3", "--steps", "50",
                    "--timeout", "1", timeout=120)
    assert done.returncode != 0
    assert "zero profile --dry-run was still tracing after --timeout 1 seconds and was stopped; pass a larger " \
           "--timeout" in done.stderr, done.stderr[-2000:]


def test_a_model_type_transformers_does_not_know_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "nosuch", "hidden_size": 64}))
    done = run_zero("profile", "--model", str(tmp_path), "--dry-run")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == ["zero: error: --model: model_type 'nosuch' is not one transformers "
                                                "knows; pass the config.json of a causal language model (llama, "
                                                "gpt_neox, qwen2, ...)"], done.stderr[-2000:]


def test_a_value_transformers_refuses_is_one_line_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64,
                                                      "num_attention_heads": "x"}))
    done = run_zero("profile", "--model", str(tmp_path), "--dry-run")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zero: error: --model: transformers refuses this llama config: "
                                                   "Validation error for field 'num_attention_heads'"), lines
