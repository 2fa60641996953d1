"""A training script's command line, as DeepSpeed reads it: `add_config_arguments(parser)` adds DeepSpeed's
flags, and `initialize(args=...)` takes the ds_config from `args.deepspeed_config` with DeepSpeed's rules."""
from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from zero_plugins import ZeroError, env_int

log = logging.getLogger("zero_core.engine")


def add_config_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add DeepSpeed's argument group to `parser` and return it: `--deepspeed` (a flag for the script's own use),
    `--deepspeed_config PATH`, and the deprecated `--deepscale` / `--deepscale_config`, with DeepSpeed's defaults."""
    group = parser.add_argument_group("DeepSpeed", "DeepSpeed configurations")
    group.add_argument("--deepspeed", default=False, action="store_true",
                       help="train with DeepSpeed's engine (read by the script; the engine does not look at it)")
    group.add_argument("--deepspeed_config", default=None, type=str, help="the ds_config JSON file")
    group.add_argument("--deepscale", default=False, action="store_true", help="deprecated spelling of --deepspeed")
    group.add_argument("--deepscale_config", default=None, type=str,
                       help="deprecated spelling of --deepspeed_config")
    return parser


def config_source(args: Any, config: Any, config_params: Any) -> Any:
    """The ds_config `initialize` was given: `config` (or `config_params`), or `args.deepspeed_config`, never two."""
    check_local_rank(args)
    given = [value for value in (config, config_params) if value is not None]
    if len(given) == 2:
        raise ZeroError("pass the ds_config once: config= or config_params=, not both")
    from_args = _args_config(args)
    if from_args is not None and given:
        raise ZeroError("two ds_configs: args.deepspeed_config and config= (or config_params=); pass one of them")
    if given:
        return given[0]
    if from_args is not None:
        return from_args
    raise ZeroError("no ds_config: pass config= (a JSON path or a dict), or args with a deepspeed_config attribute "
                    "(--deepspeed_config)")


def _args_config(args: Any) -> Any:
    """`args.deepspeed_config`, or the deprecated `args.deepscale_config` (with DeepSpeed's warning)."""
    current = getattr(args, "deepspeed_config", None)
    deprecated = getattr(args, "deepscale_config", None)
    if deprecated is None:
        return current
    if current is not None:
        raise ZeroError("two ds_configs: args.deepspeed_config and the deprecated args.deepscale_config; "
                        "pass --deepspeed_config only")
    log.warning("--deepscale_config is deprecated; use --deepspeed_config")
    return deprecated


def check_local_rank(args: Any) -> None:
    """A launcher's `--local_rank` must agree with LOCAL_RANK, as DeepSpeed checks (a negative one is unset)."""
    local_rank = getattr(args, "local_rank", None)
    if local_rank is None:
        return
    if not isinstance(local_rank, int):
        raise ZeroError(f"args.local_rank must be an int (got {type(local_rank).__name__}); parse it with type=int")
    environment = os.environ.get("LOCAL_RANK")
    if local_rank >= 0 and environment is not None and env_int("LOCAL_RANK", local_rank, minimum=0) != local_rank:
        raise ZeroError(f"args.local_rank={local_rank} but LOCAL_RANK={environment}; pass the launcher's "
                        "--local_rank unchanged, or leave it out")
