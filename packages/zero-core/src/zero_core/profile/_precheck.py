"""Checks of a `zero profile` request made before any rank starts or any setting is traced.

- `initialize_each_setting` (`--dry-run`): each setting initialized once on a one-layer model. A refusal
  of `initialize` that depends only on the config (an optimizer parameter the offloaded CPU optimizer does
  not take, a swap buffer count, a dtype the target device lacks) then fails in seconds, instead of after
  the settings before it were traced.
- `check_host_memory` (a real run): every rank builds the whole model in host memory, so a model that
  cannot fit there is refused with the figures, instead of a rank dying of it long after the start.
"""
from __future__ import annotations

import warnings
from typing import Any

import torch
from zero_plugins import ZeroError

from ..dryrun import dry_run
from ._attention import hf_implementation
from ._estimator import estimate_memory, estimate_request
from ._models import build_model
from ._ranks import DTYPES, prepared_model
from ._request import ProfileRequest

GIB = 1 << 30


class HostMemoryShortage(ZeroError, MemoryError):
    """The ranks of a real `zero profile` run would hold more host memory than is available."""


def initialize_each_setting(request: ProfileRequest) -> None:
    """Raise what `initialize` would raise for any of the request's settings (its ds_config, not its model)."""
    from ..engine import initialize

    target = request.dry_run
    assert target is not None, "initialize_each_setting needs a request with dry_run set"
    for setting in request.settings:
        model = torch.nn.Linear(8, 8, device="meta")  # built outside the dry run, as the traced model is
        with warnings.catch_warnings():  # the trace's own initialize warns of the config, once per setting
            warnings.simplefilter("ignore")
            with dry_run(rank=0, world_size=request.nproc, device=target.device,
                         total_memory=target.total_memory) as run:
                model = model.to_empty(device=run.accelerator.device())
                engine, _, _, _ = initialize(model=model, config=request.config_for(setting))
                engine.destroy()


def check_host_memory(request: ProfileRequest, device: str, available: int) -> None:
    """HostMemoryShortage if the request's ranks, all on this host, need more than `available` bytes.

    What one rank holds is the estimate's own figure (the one the report sets beside the measurement) at its
    worst phase and setting: its host lines, and on a CPU device its device lines too, which are then host
    memory; the model is built on the meta device to be counted, so this costs no memory.
    """
    model = prepared_model(request, build_model(request.model_config, DTYPES[request.precision], request.seed,
                                                device="meta", attention=hf_implementation(request.attention,
                                                                                           dry_run=True)))
    params = sum(parameter.numel() for parameter in model.parameters())
    worst = max(((host_bytes(estimate_memory({**estimate_request(request, setting), "module": model,
                                                "device": device}), device), setting.label)
                 for setting in request.settings), key=lambda pair: pair[0])
    problem = host_memory_problem(worst[0], request.nproc, available, f"{worst[1]}, {params:,} parameters")
    if problem is not None:
        raise HostMemoryShortage(f"zero profile --model {request.model_name}: {problem}")


def host_bytes(estimate: dict[str, Any], device: str) -> int:
    """The most host memory one rank holds in any phase of `estimate` (zero-estimate's as_dict())."""
    locations = ("cpu", "pinned", "gpu") if device == "cpu" else ("cpu", "pinned")
    return max(sum(int(figures[location]) for location in locations) for figures in estimate["phases"].values())


def host_memory_problem(per_rank: int, ranks: int, available: int, what: str) -> str | None:
    """Why `ranks` ranks of `per_rank` bytes each do not fit in `available` bytes (with the fix), or None."""
    needed = per_rank * ranks
    if needed <= available:
        return None
    return (f"{ranks} rank{'s' if ranks > 1 else ''} on this host need {needed / GIB:,.2f} GiB of host memory ({ranks} x "
            f"{per_rank / GIB:,.2f} GiB, the estimate's peak per rank at {what}), but {available / GIB:,.2f} GiB "
            "is available (MemAvailable); use fewer ranks (--nproc), answer it with --dry-run (which needs no "
            "memory for the model), or profile a smaller model (--model)")
