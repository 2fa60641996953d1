"""`zero plan --verify` end to end: the dry run, not the formula, decides; the chosen config fits when profiled
alone; a second search traces nothing again.

pythia-tiny (from a config.json: `zero plan` knows only the full-size presets) on 2 ranks, micro-batch 4 of 256
tokens. The formula puts stage 0 at 237,302,788 bytes per rank, the dry run at 238,455,808 (the backward's
transients the estimator leaves out, docs/estimate.md): a budget of 238,000,000 bytes fits the formula's top
candidate by its own count and not by the trace.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_zero

BUDGET = 238_000_000
PYTHIA_TINY = {"model_type": "gpt_neox", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
               "intermediate_size": 1024, "vocab_size": 8192, "max_position_embeddings": 2048}
TIMEOUT = 240


def _plan(tmp: Path, *extra: str) -> Any:
    return run_zero("plan", "--config", str(tmp / "config.json"), "--gpus", "2", "--gpu-memory", f"{BUDGET}B",
                    "--headroom", "0", "--seq-len", "256", "--micro-batch", "4", "--verify", "--verify-count", "1",
                    *extra, timeout=TIMEOUT, ZERO_PLAN_VERIFY_CACHE=str(tmp / "cache"))


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    tmp = tmp_path_factory.mktemp("plan-verify")
    (tmp / "config.json").write_text(json.dumps(PYTHIA_TINY))
    done = _plan(tmp, "--json", "--write", str(tmp / "ds_config.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp, json.loads(done.stdout)["verify"], done.stderr


def test_the_dry_run_rules_out_the_formulas_top_candidate(searched: tuple[Path, dict[str, Any], str]) -> None:
    _, verify, stderr = searched
    first, second = verify["candidates"][:2]
    assert first["settings"] == "stage 0, offload none/none, checkpointing none, micro-batch 4, attention sdpa"
    assert first["formula"]["gpu_peak"] == 237_302_788 <= BUDGET  # the formula fits it
    assert first["verified"]["gpu_peak"] == 238_455_808 > BUDGET  # the trace does not
    assert first["verdict"] == "does not fit" and not first["cached"]
    assert second["settings"].startswith("stage 1, offload none/none") and second["verdict"] == "fits"
    assert verify["survivors"] == [1]
    assert {c["verdict"] for c in verify["candidates"][2:]} == {"not tried"}
    assert "zero plan --verify: candidate 1 of " in stderr and ": tracing (" in stderr
    # the proxy of every candidate comes with it
    assert second["proxy"]["tokens"] == 4 * 256 and 0 <= second["proxy"]["transfer_bound"] < 1


def test_the_written_config_profiled_alone_fits_the_budget(searched: tuple[Path, dict[str, Any], str]) -> None:
    tmp, verify, _ = searched
    chosen = verify["candidates"][verify["survivors"][0]]
    written = json.loads((tmp / "ds_config.json").read_text())
    assert written["zero_optimization"]["stage"] == 1 and written["train_micro_batch_size_per_gpu"] == 4
    done = run_zero("profile", "--dry-run", "--model", str(tmp / "config.json"), "--ds-config",
                    str(tmp / "ds_config.json"), "--nproc", "2", "--seq-len", "256", "--steps", "2", "--json",
                    timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    setting = json.loads(done.stdout)["settings"][0]
    peak = max(setting["peak"]["measured"]["bytes"], *setting["ranks"])
    assert peak == chosen["verified"]["gpu_peak"] == 194_332_672 <= BUDGET


def test_a_second_search_traces_nothing_again(searched: tuple[Path, dict[str, Any], str]) -> None:
    tmp, first, _ = searched
    done = _plan(tmp, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    again = json.loads(done.stdout)["verify"]
    traced = [c for c in again["candidates"] if c["verified"] is not None]
    assert len(traced) == 2 and all(c["cached"] and c["seconds"] == 0 for c in traced)
    assert [c["verified"] for c in traced] == [c["verified"] for c in first["candidates"][:2]]
    assert ": tracing (" not in done.stderr and "zero profile --dry-run:" not in done.stderr
    assert done.stderr.count(": cached: ") == 2
    assert len(list((tmp / "cache").glob("*.json"))) == 2
