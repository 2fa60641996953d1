"""`run_profile`: launch the ranks, measure each setting, and set the estimate beside it."""
from __future__ import annotations

from typing import Any

from ..launch import run_ranks
from ._compare import GAP_THRESHOLD, compare
from ._dry import MODELLED, run_dry_ranks
from ._ranks import profile_rank
from ._request import ProfileRequest

# 2: the allocator is the ruler (phases[].allocator, allocator_error; setting.ruler); 3: dry_run; 4: a phase that
# did not happen has null measured figures and its reason (phases[].absent); setting.optimizer_kernel
SCHEMA_VERSION = 4


def run_profile(request: ProfileRequest) -> dict[str, Any]:
    """The `zero profile --json` document (docs/profile.md, "JSON")."""
    if request.dry_run is None:
        per_rank = run_ranks(profile_rank, request.nproc, request, timeout=request.timeout)
    else:
        per_rank = run_dry_ranks(request)
    settings = []
    for index, setting in enumerate(request.settings):
        first = per_rank[0][index]
        comparison = compare(setting.label, first["device"], [rank[index]["phases"] for rank in per_rank],
                             first["estimate"], first["allocator"], first["absent"])
        settings.append({"setting": setting.as_dict(), **comparison, "allocator": first["allocator"],
                         "optimizer_kernel": first["optimizer_kernel"], "attention": first["attention"],
                         "placement": first["placement"], "placement_summary": first["placement_summary"],
                         "estimate_inputs": first["estimate"].get("inputs", {})})
    return {
        "schema_version": SCHEMA_VERSION,
        "model": {"name": request.model_name, "config": request.model_config, "lora_rank": request.lora_rank},
        "nproc": request.nproc,
        "precision": request.precision,
        "micro_batch": request.micro_batch,
        "seq_len": request.seq_len,
        "steps": request.steps,
        "attention": request.attention.value,
        "gap_threshold": GAP_THRESHOLD,
        "ds_config": request.ds_config,
        "notes": list(request.notes),
        "settings": settings,
        # null for a real run; for a dry run, the target, the ranks traced and what was modelled, not traced
        "dry_run": None if request.dry_run is None else {**request.dry_run.as_dict(),
                                                          "modelled": MODELLED[request.dry_run.device]},
    }
