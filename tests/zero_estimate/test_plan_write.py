"""`zero plan --write`: the top fitting configuration as a ds_config file, written whole, never over a file or link
unasked; `--json` gives every candidate's (no torch)."""
from __future__ import annotations

import json
import os

import pytest
from zero_plugins.ds_config import load_config

from cli_helpers import run_main

# DeepSpeed issue #4305's setup: stage 3 is the first that fits.
PLAN = ["plan", "--preset", "pythia-6.9b", "--lora-rank", "128", "--gpus", "4", "--gpu-memory", "24GB",
        "--precision", "fp16", "--seq-len", "1200", "--attention", "eager"]


def test_write_puts_the_top_fit_in_a_new_file_and_says_what_the_config_cannot(capsys, tmp_path):
    path = tmp_path / "ds_config.json"
    code, out, err = run_main(capsys, *PLAN, "--write", str(path))
    assert code == 0 and "Fits in 24.00 GiB per GPU" in out
    assert err == (f"zero: wrote {path}: stage 3, offload none/none\n"
                   "zero: note: the config assumes 1200 tokens per sample, eager attention\n"
                   "zero: note: the config assumes the client's optimizer is adamw (no optimizer block is written: "
                   "the plan knows no learning rate)\n"
                   "zero: note: the config assumes LoRA adapters of rank 128 on all-linear; the base model frozen\n")
    written = json.loads(path.read_text())
    assert written["zero_optimization"]["stage"] == 3 and written["fp16"] == {"enabled": True}
    assert (written["train_batch_size"], written["gradient_accumulation_steps"]) == (4, 1)
    assert load_config(path, world_size=4).zero_optimization.stage == 3


def test_write_keeps_the_users_config_and_refuses_an_existing_file_without_force(capsys, tmp_path):
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1,
                                "fp16": {"enabled": True}, "steps_per_print": 7}))
    path = tmp_path / "ds_config.json"
    path.write_text("{}")
    code, out, err = run_main(capsys, *PLAN, "--ds-config", str(base), "--write", str(path))
    assert (code, out) == (2, "")
    assert err == f"zero: error: --write: {path} exists; pass --force to replace it, or another path\n"
    assert path.read_text() == "{}"
    code, _, _ = run_main(capsys, *PLAN, "--ds-config", str(base), "--write", str(path), "--force")
    written = json.loads(path.read_text())
    # The plan's micro-batch and accumulation come from --ds-config: 16 = 1 x 4 accumulation x 4 GPUs.
    assert code == 0 and (written["steps_per_print"], written["gradient_accumulation_steps"]) == (7, 4)


def test_write_never_goes_through_a_link(capsys, tmp_path):
    target = tmp_path / "someone_elses.json"
    target.write_text("theirs")
    link = tmp_path / "ds_config.json"
    link.symlink_to(target)
    code, _, err = run_main(capsys, *PLAN, "--write", str(link), "--force")
    assert code == 2
    assert err == (f"zero: error: --write: {link} is a symbolic link, which zero does not write through or "
                   "replace; pass another path, or remove the link\n")
    assert (target.read_text(), os.readlink(link)) == ("theirs", str(target))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--force"], "--force: goes with --write PATH"),
        (["--gpu-memory", "1GB", "--write", "{dir}/x.json"],
         "--write: nothing fits the limits, so there is no configuration to write; nothing was written"),
        (["--write", "{dir}"], "--write: {dir} is a directory; pass the path of the file to write"),
        (["--write", "{dir}/no/x.json"], "--write: the directory {dir}/no does not exist; make it, or pass another"),
    ],
)
def test_write_errors_name_the_flag_and_write_nothing(capsys, tmp_path, args, message):
    args = [arg.format(dir=tmp_path) for arg in args]
    code, out, err = run_main(capsys, *PLAN, *args)
    assert (code, out) == (2, "")
    assert err.startswith("zero: error: " + message.format(dir=tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_json_gives_every_candidates_complete_config_or_why_not(capsys):
    code, out, _ = run_main(capsys, *PLAN, "--nvme", "1TB", "--json")
    data = json.loads(out)
    assert code == 0
    top = data["fits"][0]["ds_config"]
    assert (top["config"]["zero_optimization"]["stage"], top["keys_deepspeed_lacks"]) == (3, [])
    nvme = [c["ds_config"] for c in data["fits"] if "nvme" in str(c["zero_optimization"])]
    assert nvme and all(c == {"config": None, "error": "zero_optimization.offload_optimizer.nvme_path: is required "
                                                      "for NVMe offload; pass the directory on the NVMe drive "
                                                      "(--nvme-path, or nvme_path in --ds-config)"} for c in nvme)
    code, out, _ = run_main(capsys, *PLAN, "--nvme", "1TB", "--nvme-path", "/nvme", "--json")
    configs = [c["ds_config"]["config"] for c in json.loads(out)["fits"] + json.loads(out)["misses"]]
    assert all(config is not None for config in configs)
