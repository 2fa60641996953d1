"""`zero estimate` and `zero plan`: tables, --json, --ds-compat, --explain, and one-line errors (exit 2)."""
from __future__ import annotations

import json

import pytest
from zero_estimate import Cluster, Training, ZeroSettings, estimate, from_numbers

from cli_helpers import imported_modules, run_main, run_zero
from estimate_golden import ZERO2_NEEDS, ZERO2_TABLE, ZERO3_TABLE


def test_default_output_is_the_per_phase_table_and_the_category_breakdown(capsys):
    code, out, err = run_main(capsys, "estimate", "--params", "6.9e9", "--gpus", "4")
    assert code == 0 and err == ""
    assert "stage  offload opt/param  init   forward  backward  step" in out
    assert "GiB per GPU by ledger category, at each stage's GPU peak" in out
    rows = [line.split()[0] for line in out.splitlines() if line[:1] in "0123" and "none/none" in line]
    assert rows == ["0", "1", "2", "3"]
    assert "note: activations not estimated" in out


def test_json_is_the_estimate_alone_on_stdout_and_matches_the_api(capsys):
    args = ["--params", "6.9e9", "--largest-layer", "2e8", "--gpus", "4", "--stage", "3", "--json"]
    code, out, _ = run_main(capsys, "estimate", *args)
    data = json.loads(out)
    api = estimate(from_numbers(6_900_000_000, 200_000_000), Cluster(4), Training(), ZeroSettings(stage=3))
    assert code == 0 and len(data["estimates"]) == 1
    assert data["estimates"][0]["phases"]["backward"]["gpu"] == api.total("gpu", "backward")
    # stage 3 in bf16 keeps no 16-bit partition: gathers cast the fp32 master
    assert {line["category"] for line in data["estimates"][0]["lines"]} >= {"param.gathered", "optim.state"}


def test_ds_compat_prints_deepspeeds_tables(capsys):
    args = ["--params", "2851e6", "--largest-layer", "32e6", "--gpus", "8", "--ds-compat"]
    code, out, err = run_main(capsys, "estimate", *args)
    assert code == 0 and err == ""
    assert out == ZERO2_TABLE + ZERO3_TABLE


def test_ds_compat_json_and_a_missing_largest_layer(capsys):
    code, out, err = run_main(capsys, "estimate", "--params", "2851e6", "--gpus", "8", "--ds-compat", "--json")
    data = json.loads(out)
    assert code == 0 and list(data) == ["zero2"]
    cpu, gpu = ZERO2_NEEDS[False]
    assert data["zero2"][1] == {"cpu_bytes": cpu, "gpu_bytes": gpu, "offload_optimizer": "none"}
    assert "needs --largest-layer" in err


def test_explain_puts_the_numbers_into_each_formula(capsys):
    code, out, _ = run_main(capsys, "estimate", "--preset", "llama-2-7b", "--gpus", "8", "--stage", "2", "--explain")
    assert code == 0
    assert "  T   trainable params" in out
    # Adam's m and v, and a 4-byte step count per fp32 master tensor (K: llama's 14 reduce buckets at stage 2)
    assert "      8 * ceil(T/N) + 4 * K = 8 * ceil(6,738,415,616/8) + 4 * 14 = 6,738,415,672 B = 6.28 GiB" in out


def test_pythia_lora_example_compares_stage_2_and_3_per_phase(capsys):
    args = ["--preset", "pythia-6.9b", "--lora-rank", "128", "--gpus", "4", "--precision", "fp16", "--seq-len", "1200"]
    code, out, _ = run_main(capsys, "estimate", *args, "--stage", "2,3", "--no-memory-efficient-linear")
    assert code == 0
    assert "268.4M trainable: LoRA rank 128 on all-linear" in out
    table = {line.split()[0]: line.split()[2:6] for line in out.splitlines() if line.split()[1:2] == ["none/none"]}
    init2, forward2 = (float(v) for v in table["2"][:2])
    init3, forward3 = (float(v) for v in table["3"][:2])
    assert init3 < init2 and forward3 > forward2


def test_plan_lists_fits_cheapest_first_and_the_nearest_misses(capsys):
    # DeepSpeed issue #4305's setup; the transformers of its day ran GPT-NeoX's eager attention.
    args = ["--preset", "pythia-6.9b", "--lora-rank", "128", "--precision", "fp16", "--seq-len", "1200",
            "--attention", "eager"]
    code, out, _ = run_main(capsys, "plan", "--gpu-memory", "24GB", "--gpus", "4", *args)
    assert code == 0
    fits = out.split("cheapest first:\n")[1].split("\n\n")[0].splitlines()[2:]
    assert fits[0].split()[:2] == ["3", "none/none"]
    assert "Nearest misses:\n  stage 2, offload cpu/none: GPU needs" in out
    assert "(activations are 13.60 GiB of it: try --checkpointing full)" in out
    code, out, _ = run_main(capsys, "plan", "--gpu-memory", "24GB", "--gpus", "4", *args, "--json")
    assert json.loads(out)["fits"][0]["zero_optimization"] == {"stage": 3}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["estimate", "--params", "0"], "--params: must be at least 1 (got 0)"),
        (["estimate", "--params", "-5"], "--params: must be at least 1 (got -5)"),
        (["estimate", "--params", "lots"], "--params: 'lots' is not a count; write e.g. 6.9e9"),
        (["estimate", "--params", "7e9", "--gpus", "0"], "--gpus: must be at least 1 (got 0)"),
        (["estimate", "--params", "7e9", "--nodes", "-1"], "--nodes: must be at least 1 (got -1)"),
        (["estimate", "--preset", "pythia-6.8b"], "--preset: unknown preset 'pythia-6.8b'; did you mean 'pythia-6.9b'?"),
        (["estimate"], "no model given; pass exactly one of --params N, --preset NAME or --config PATH"),
        (["estimate", "--params", "7e9", "--stage", "4"], "--stage: '4' is not a stage; pass stages 0-3"),
        (["estimate", "--params", "7e9", "--stage", "2", "--offload-param", "cpu"], "--offload-param: offloading"),
        (["estimate", "--params", "7e9", "--ds-compat", "--additional-buffer-factor", "0"], "--additional-buffer-factor:"),
        (["estimate", "--params", "7e9", "--precision", "fp8"], "--precision: unknown value 'fp8'; choose from"),
        (["estimate", "--params", "7e9", "--lora-rank", "8"], "--lora-rank: LoRA needs the model's layers"),
        (["estimate", "--preset", "gpt2-xl", "--seq-len", "2048"], "--seq-len: 2048 is longer than the 1024 positions"),
        (["estimate", "--preset", "gpt2-xl", "--largest-layer", "5"], "--largest-layer goes with --params"),
        (["plan", "--params", "7e9"], "--gpu-memory: required; pass the memory of each GPU, e.g. --gpu-memory 24GB"),
        (["plan", "--params", "7e9", "--gpu-memory", "24"], "--gpu-memory: '24' is not a size; write a number with"),
    ],
)
def test_bad_input_is_one_line_naming_the_problem_and_exits_2(capsys, args, message):
    code, out, err = run_main(capsys, *args)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("zero: error: ")
    assert message in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ('{"model_type": "gpt2", "n_layer": ', "is not valid JSON: Expecting value at line 1 column 35"),
        ('{"model_type": "falcon"}', "model_type: unknown model type 'falcon'; choose from: bert, gpt2"),
        ('{"model_type": "llama", "hidden_size": -1}', "hidden_size: must be at least 1 (got -1)"),
    ],
)
def test_bad_config_files_are_one_line_and_exit_2(capsys, tmp_path, content, message):
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    code, out, err = run_main(capsys, "estimate", "--config", str(path))
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert message in err


def test_the_zero_command_exits_2_on_bad_input():
    result = run_zero("estimate", "--params", "7e9", "--gpus", "0")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "zero: error: --gpus: must be at least 1 (got 0)\n"


def test_estimate_from_counts_imports_neither_torch_nor_pydantic():
    imported = imported_modules("estimate", "--params", "6.9e9", "--gpus", "4")
    assert "zero_estimate._cli" in imported  # the trace is real
    assert not [name for name in imported if name.split(".")[0] in ("torch", "numpy", "pydantic")]


def test_explain_and_json_give_the_placement_plan(capsys):
    args = ["--preset", "pythia-6.9b", "--gpus", "4", "--stage", "2,3"]
    code, out, _ = run_main(capsys, "estimate", *args, "--explain")
    assert code == 0
    assert "placement plan: 16 B of model states per element of a partition at the step" in out  # stage 3
    assert "placement plan: 26 B" in out  # stage 2: 2P whole (8 per element on 4 ranks) + 4 + 2 + 4 + 8
    code, out, _ = run_main(capsys, "estimate", *args, "--step-in-backward", "--stage", "3", "--json")
    placement = json.loads(out)["estimates"][0]["placement"]
    assert placement["model_state_bytes_per_param"] == 12
    assert placement["step"] == "each sub-group as its gradient completes"
    assert {row["copy"] for row in placement["copies"]} >= {"fp32 master", "optimizer state"}
