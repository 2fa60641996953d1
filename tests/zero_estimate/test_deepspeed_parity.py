"""Optional: 1,000 random setups give exactly DeepSpeed 0.19.8's numbers and tables.

Runs where deepspeed is installed (tox env or dev venv); DS_ACCELERATOR=cpu lets it import
without a GPU.
"""
from __future__ import annotations

import contextlib
import io
import os
import random

import pytest
from zero_estimate import stage3, stage_1_and_2



def _import_deepspeed():
    """Import DeepSpeed on its CPU accelerator, leaving DS_ACCELERATOR as it was for other tests."""
    saved = os.environ.get("DS_ACCELERATOR")
    os.environ["DS_ACCELERATOR"] = "cpu"
    try:
        stage2 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
        return stage2, pytest.importorskip("deepspeed.runtime.zero.stage3")
    finally:
        if saved is None:
            del os.environ["DS_ACCELERATOR"]
        else:
            os.environ["DS_ACCELERATOR"] = saved


ds_stage2, ds_stage3 = _import_deepspeed()


def _setups(count: int) -> list[dict]:
    rng = random.Random(20260411)
    setups = []
    for i in range(count):
        total = 10 ** rng.uniform(6, 12)
        total = round(total) if i % 2 else total  # DeepSpeed takes floats (2851e6) and ints alike
        setups.append(
            {
                "total_params": total,
                "largest_layer_params": rng.uniform(0, total / 8) if i % 3 else round(rng.uniform(0, total)),
                "num_gpus_per_node": rng.randint(1, 16),
                "num_nodes": rng.randint(1, 64),
                "additional_buffer_factor": rng.choice([1.5, 1.0, 1.25, rng.uniform(1, 3)]),
                "flags": (rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.5),
            }
        )
    return setups


SETUPS = _setups(1000)


def test_zero2_numbers_match_deepspeed_on_1000_random_setups():
    for s in SETUPS:
        args = (s["total_params"], s["num_gpus_per_node"], s["num_nodes"], s["flags"][0], s["additional_buffer_factor"])
        ours = stage_1_and_2.estimate_zero2_model_states_mem_needs(*args)
        assert ours == ds_stage2.estimate_zero2_model_states_mem_needs(*args), s


def test_zero3_numbers_match_deepspeed_on_1000_random_setups():
    for s in SETUPS:
        args = (
            s["total_params"],
            s["largest_layer_params"],
            s["num_gpus_per_node"],
            s["num_nodes"],
            *s["flags"],
            s["additional_buffer_factor"],
        )
        ours = stage3.estimate_zero3_model_states_mem_needs(*args)
        assert ours == ds_stage3.estimate_zero3_model_states_mem_needs(*args), s


def _printed(function, **kwargs) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        function(**kwargs)
    return out.getvalue()


def test_tables_match_deepspeed_except_the_enum_spelling():
    # DeepSpeed formats OffloadDeviceEnum.cpu with ":4", which reads "cpu " only up to Python 3.10.
    for s in SETUPS[:100]:
        hw = {k: s[k] for k in ("num_gpus_per_node", "num_nodes", "additional_buffer_factor")}
        total = s["total_params"]
        ours = _printed(stage_1_and_2.estimate_zero2_model_states_mem_needs_all_cold, total_params=total, **hw)
        theirs = _printed(ds_stage2.estimate_zero2_model_states_mem_needs_all_cold, total_params=total, **hw)
        assert ours == theirs.replace("OffloadDeviceEnum.cpu", "cpu ")
        counts = {"total_params": s["total_params"], "largest_layer_params": s["largest_layer_params"]}
        ours = _printed(stage3.estimate_zero3_model_states_mem_needs_all_cold, **counts, **hw)
        theirs = _printed(ds_stage3.estimate_zero3_model_states_mem_needs_all_cold, **counts, **hw)
        assert ours == theirs.replace("OffloadDeviceEnum.cpu", "cpu ")


def test_live_counts_match_deepspeed_on_a_materialized_model_with_tied_weights():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Embedding(100, 8), torch.nn.Linear(8, 100), torch.nn.Linear(100, 3))
    model[1].weight = model[0].weight  # tied
    assert stage3.model_to_params(model) == ds_stage3.model_to_params(model)
    assert stage_1_and_2.model_to_params(model) == ds_stage2.model_to_params(model)
