"""`zero profile`: 2 ranks, a small GPT-NeoX with LoRA at stages 2 and 3 (memory_efficient_linear both ways).

The JSON report's schema (docs/profile.md, "JSON", version 3), the measured figures against the ledger's own
rules (each phase's total is the sum of its categories, init holds no optimizer state, held weights only with
memory_efficient_linear false), the allocator beside them as the ruler (on CPU zero-pin's count of the CPU
allocator: untracked = allocator - ledger, the peak taken at the allocator), the estimate beside them, the
HTML report well-formed with one allocator line per phase, and bad arguments rejected in one line.
"""
from __future__ import annotations

import argparse
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_main, run_zero
from zero_core.profile import Setting, profile_text

TINY = {"model_type": "gpt_neox", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 256, "vocab_size": 512, "max_position_embeddings": 64}
PHASES = ["init", "forward", "backward", "step"]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, str]:
    folder = tmp_path_factory.mktemp("profile")
    (folder / "config.json").write_text(json.dumps(TINY))
    page = folder / "report.html"
    args = ["profile", "--model", str(folder), "--ds-config", "examples/profile_ds_config.json", "--stages", "2,3",
            "--memory-efficient-linear", "both", "--lora-rank", "4", "--seq-len", "32", "--steps", "2",
            "--timeout", "240"]
    done = run_zero(*args, "--json", "--html", str(page), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "zero profile: stage 3, memory_efficient_linear true (3/3): step 2/2" in done.stderr, "progress"
    report = json.loads(done.stdout)
    return report, page.read_text(), profile_text(report)  # the text `zero profile` prints without --json


def test_the_json_report_follows_its_schema(profiled: tuple[dict[str, Any], str, str]) -> None:
    report, _, _ = profiled
    assert report["schema_version"] == 4 and report["dry_run"] is None
    assert report["nproc"] == 2 and report["precision"] == "bf16" and report["seq_len"] == 32
    assert report["model"]["lora_rank"] == 4 and report["model"]["config"] == TINY
    labels = [s["label"] for s in report["settings"]]
    assert labels == ["stage 2", "stage 3, memory_efficient_linear false", "stage 3, memory_efficient_linear true"]
    for setting in report["settings"]:
        assert setting["device"] == "cpu" and len(setting["ranks"]) == 2
        assert list(setting["phases"]) == PHASES and setting["optimizer_kernel"] == "single-tensor"
        for phase in setting["phases"].values():
            assert phase["absent"] is None, "2 steps at gradient_accumulation_steps 1: every phase happened"
            assert phase["measured_total"] == sum(phase["measured"].values())
            assert phase["estimated_total"] == sum(phase["estimated"].values())
            explained = sum(g["difference"] for g in setting["gaps"] if phase is setting["phases"][g["phase"]])
            assert phase["unexplained"] == phase["estimated_total"] - phase["measured_total"] - explained
        peak = setting["peak"]["measured"]  # taken at the allocator, the ruler
        assert peak["bytes"] == max(p["allocator"]["allocator"] for p in setting["phases"].values())
        assert setting["phases"][peak["phase"]]["allocator"]["allocator"] == peak["bytes"]
        for gap in setting["gaps"]:
            total = setting["phases"][gap["phase"]]["measured_total"]
            assert abs(gap["difference"]) > 0.05 * total and gap["cause"]
        assert setting["estimate_inputs"]["micro_batch"] == 2
        assert setting["ruler"] == "CPU allocator count", "rank 0 counted the CPU allocator before building the model"
        assert setting["allocator"]["ruler"] == "CPU allocator count" and setting["allocator"]["locations"] == ["cpu"]
        assert setting["allocator"]["max_reserved"] is None, "the CPU accelerator has no caching allocator"
        for name, phase in setting["phases"].items():
            counted = phase["allocator"]
            assert counted == setting["allocator"]["phases"][name]
            assert counted["untracked"] == counted["allocator"] - counted["ledger"]
            # The ledger's counted bytes are live allocations: never more than the allocator's peak, and
            # (every weight counted) all but a few percent of it.
            assert 0 <= counted["untracked"] <= 0.05 * counted["allocator"], (setting["label"], name, counted)
            assert phase["estimated_at_allocator"] == phase["estimated_total"], "the device is the one location counted"
            assert phase["allocator_error"] == pytest.approx(
                (phase["estimated_at_allocator"] - counted["allocator"]) / counted["allocator"])


def test_measured_memory_follows_the_engine(profiled: tuple[dict[str, Any], str, str]) -> None:
    report, _, _ = profiled
    stage2, held, efficient = report["settings"]
    for setting in report["settings"]:
        assert "optim.state" not in setting["phases"]["init"]["measured"], "Adam's state appears at the first step"
        assert setting["phases"]["step"]["measured"]["optim.state"] > 0
        assert setting["phases"]["forward"]["measured"]["activations"] > 0
    assert "param.partition" not in stage2["phases"]["init"]["measured"]
    assert held["phases"]["init"]["measured"]["param.partition"] > 0
    gathered_held = [p["measured"].get("param.gathered.held", 0) for p in held["phases"].values()]
    assert max(gathered_held) > 0, "memory_efficient_linear false: autograd keeps gathered weights"
    assert all(p["measured"].get("param.gathered.held", 0) == 0 for p in efficient["phases"].values())


def test_the_text_report_names_each_setting_and_the_held_weights(profiled: tuple[dict[str, Any], str, str]) -> None:
    _, _, text = profiled
    assert "stage 3, memory_efficient_linear false (device: cpu; ruler: CPU allocator count; optimizer step: " \
           "single-tensor)" in text, "torch's default on CPU tensors"
    header = next(line for line in text.splitlines() if line.startswith("phase "))
    assert header.split() == ["phase", "allocator", "ledger", "untracked", "of", "allocator", "estimated", "error"]
    assert "param.gathered.held" in text and "held weights" in text
    assert "summary" in text


class _Balanced(HTMLParser):
    VOID = {"meta", "br", "img", "input", "link", "hr"}

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.svgs = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.svgs += tag == "svg"
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1] if self.open else None}>"
        self.open.pop()


def test_the_html_report_is_self_contained_and_well_formed(profiled: tuple[dict[str, Any], str, str]) -> None:
    _, page, _ = profiled
    parser = _Balanced()
    parser.feed(page)
    parser.close()
    assert parser.open == [] and parser.svgs == 3
    assert page.count("<line ") == 3 * 4, "one line at the allocator's peak per phase of each setting"
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")


@pytest.mark.parametrize("args, message", [
    (["--model", "no-such-model"], "neither a preset"),
    (["--model", "pythia-tiny", "--stages", "4"], "--stages 4 is out of range; pass 0 to 3"),
    (["--model", "pythia-tiny", "--lora-rank", "100000"], "--lora-rank 100000 is out of range"),
    (["--model", "pythia-tiny", "--nproc", "0"], "--nproc 0 is out of range"),
    (["--model", "pythia-tiny", "--micro-batch", "0"], "--micro-batch 0 is out of range; pass 1 to 1024"),
    (["--model", "pythia-tiny", "--timeout", "-5"], "--timeout -5 is out of range; pass 1 to 86400 seconds"),
    (["--model", "pythia-tiny", "--seq-len", "999999"], "--seq-len 999999 is out of range; pass 1 to 2048"),
    (["--model", "pythia-tiny", "--ds-config", "no-such.json"], "no-such.json: not found"),
])
def test_bad_arguments_are_one_line(args: list[str], message: str) -> None:
    done = run_zero("profile", *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_bad_ds_config_fails_before_any_rank_starts(tmp_path: Path) -> None:
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"zero_optimization": {"reduce_bucket_size": "big"}}))
    done = run_zero("profile", "--model", "pythia-tiny", "--ds-config", str(config))
    assert done.returncode == 2 and "reduce_bucket_size" in done.stderr and "zero profile:" not in done.stderr


def test_an_unwritable_html_path_is_refused_before_the_model_is_read(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "missing" / "report.html"
    code, out, err = run_main(capsys, "profile", "--model", str(tmp_path / "no-such-config"), "--html", str(page))
    assert (code, out) == (2, "")
    assert err == f"zero: error: --html {page}: {tmp_path / 'missing'} does not exist; create that directory first\n"


def test_auto_batch_keys_of_the_ds_config_read_as_left_out(tmp_path: Path) -> None:
    from zero_core.profile import add_profile_arguments
    from zero_core.profile._cli import request_from_args

    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}))
    parser = argparse.ArgumentParser()
    add_profile_arguments(parser)
    request = request_from_args(parser.parse_args(["--model", "pythia-tiny", "--ds-config", str(ds)]))
    assert request.micro_batch == 1 and request.settings == (Setting(0),)
    config = request.config_for(request.settings[0])
    assert (config["train_micro_batch_size_per_gpu"], config["train_batch_size"]) == (1, 2)


def test_a_config_hidden_size_that_is_no_count_is_named_with_lora(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "config.json"
    model.write_text(json.dumps({**TINY, "hidden_size": "wide"}))
    code, _, err = run_main(capsys, "profile", "--model", str(model), "--lora-rank", "4", "--seq-len", "32")
    assert (code, err) == (2, f"zero: error: --model {model}: hidden_size must be a positive whole number "
                              "(got 'wide')\n")
