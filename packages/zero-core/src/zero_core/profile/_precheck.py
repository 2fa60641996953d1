"""`zero profile --dry-run`: each setting initialized once on a one-layer model before any trace.

A refusal of `initialize` that depends only on the config (an optimizer parameter the offloaded
CPU optimizer does not take, a swap buffer count, a dtype the target device lacks) then fails in
seconds, instead of after the settings before it were traced.
"""
from __future__ import annotations

import warnings

import torch

from ..dryrun import dry_run
from ._request import ProfileRequest


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
