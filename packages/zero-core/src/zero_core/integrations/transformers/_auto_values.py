"""Filling a ds_config's "auto" values from TrainingArguments and the model, as transformers does for DeepSpeed.

transformers fills them in `HfTrainerDeepSpeedConfig.trainer_config_process` and `trainer_config_finalize`
(transformers/integrations/deepspeed.py), and accelerate adds the fp16/bf16 block that args.fp16/bf16 ask for
(`DeepSpeedPlugin.set_mixed_precision`). That class is not reused: building one switches on
`is_deepspeed_zero3_enabled()` for the whole process, and `from_pretrained` would then run `deepspeed.zero.Init`.
The rules are theirs:

- "auto" is replaced by the Trainer's value;
- a concrete value that differs from the Trainer's is a mismatch (except where transformers only fills:
  `scheduler.params.warmup_min_lr` and the hidden-size keys), and every mismatch is named in one error;
- a key under a block the config lacks (`optimizer.params.lr` without an `optimizer`) is left alone.

One difference: the keys the Trainer's loop owns (micro-batch, accumulation, global batch, clipping, and
`enabled` in an fp16/bf16 block) count as "auto" when the config leaves them out. DeepSpeed would use its own
default there and disagree with the loop the Trainer runs (an engine stepping after every micro-batch while the
Trainer accumulates two, or no clipping although max_grad_norm says 1.0).
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from zero_plugins import ZeroError

if TYPE_CHECKING:
    from transformers import TrainingArguments

AUTO = "auto"
LOOP_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size", "gradient_clipping")
# zero_optimization keys sized from the model's hidden size h: (h*h, 0.9*h*h, 10*h) -> the value, per spelling
# zero accepts (docs/config.md). The stage-3 ones are sized only at stage 3, as in transformers.
_HIDDEN_SIZE_KEYS: dict[str, Callable[[int], int]] = {"reduce_bucket_size": lambda h: h * h}
_STAGE3_HIDDEN_SIZE_KEYS: dict[str, Callable[[int], int]] = {
    "stage3_prefetch_bucket_size": lambda h: int(0.9 * h * h), "prefetch_bucket_size": lambda h: int(0.9 * h * h),
    "stage3_param_persistence_threshold": lambda h: 10 * h, "param_persistence_threshold": lambda h: 10 * h,
}


class ZeroTrainerError(ZeroError, ValueError):
    """A zero_config value or Trainer setting that ZeroTrainer cannot run; the message names it and the fix."""


def resolve_config(source: Mapping[str, Any], args: TrainingArguments, model_config: Any = None,
                   max_steps: int | None = None) -> dict[str, Any]:
    """A copy of `source` with its "auto" values filled, or one ZeroTrainerError naming every value that disagrees.

    `model_config` (the model's `config`) sizes the hidden-size keys and `max_steps` the scheduler's step counts;
    without them those keys are left as they are.
    """
    config = copy.deepcopy(dict(source))
    for key in LOOP_KEYS:
        config.setdefault(key, AUTO)
    _precision_blocks(config, args)
    filler = _Filler(config)
    micro, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
    filler.match("train_micro_batch_size_per_gpu", micro, "per_device_train_batch_size")
    filler.match("gradient_accumulation_steps", accumulation, "gradient_accumulation_steps")
    filler.match("train_batch_size", args.world_size * micro * accumulation, "train_batch_size (calculated)")
    filler.match("gradient_clipping", args.max_grad_norm, "max_grad_norm")
    filler.match("optimizer.params.lr", args.learning_rate, "learning_rate")
    filler.match("optimizer.params.betas", [args.adam_beta1, args.adam_beta2], "adam_beta1+adam_beta2")
    filler.match("optimizer.params.eps", args.adam_epsilon, "adam_epsilon")
    filler.match("optimizer.params.weight_decay", args.weight_decay, "weight_decay")
    filler.only("scheduler.params.warmup_min_lr", 0)
    filler.match("scheduler.params.warmup_max_lr", args.learning_rate, "learning_rate")
    filler.match("fp16.enabled", args.fp16, "fp16")
    filler.match("bf16.enabled", args.bf16, "bf16")
    if model_config is not None:
        _fill_hidden_size_keys(config, model_config)
    if max_steps is not None:
        filler.match("scheduler.params.total_num_steps", max_steps, "num_training_steps (calculated)")
        # At least 1, as transformers fills it: DeepSpeed's schedulers refuse 0 warmup steps.
        filler.match("scheduler.params.warmup_num_steps", max(1, args.get_warmup_steps(max_steps)), "warmup_steps")
    if filler.mismatches:
        raise ZeroTrainerError(f"zero_config disagrees with TrainingArguments: {'; '.join(filler.mismatches)}; "
                               'set these config values to "auto" (ZeroTrainer fills them in) or change the '
                               "TrainingArguments to match")
    return config


def _precision_blocks(config: dict[str, Any], args: TrainingArguments) -> None:
    # args.fp16/bf16 add their block when the config has none (accelerate's rule); a block without "enabled" follows
    # the arguments too, instead of DeepSpeed's default (off).
    for block, wanted in (("fp16", args.fp16), ("bf16", args.bf16)):
        if wanted:
            config.setdefault(block, {})
        if isinstance(config.get(block), dict):
            config[block].setdefault("enabled", AUTO)


def _fill_hidden_size_keys(config: dict[str, Any], model_config: Any) -> None:
    zero = config.get("zero_optimization")
    if not isinstance(zero, dict):
        return
    # Elsewhere than stage 3, zero reads the stage-3 keys' "auto" as their default.
    sizing = {**_HIDDEN_SIZE_KEYS, **(_STAGE3_HIDDEN_SIZE_KEYS if zero.get("stage") == 3 else {})}
    auto = [key for key in sizing if zero.get(key) == AUTO]
    if not auto:
        return
    hidden = hidden_size(model_config)
    if hidden is None:
        names = ", ".join(f"zero_optimization.{key}" for key in auto)
        raise ZeroTrainerError(f'{names}: "auto" is sized from the model\'s hidden size, but its config has neither '
                               "hidden_size nor hidden_sizes; set these keys to numbers of elements")
    for key in auto:
        zero[key] = sizing[key](hidden)


def hidden_size(model_config: Any) -> int | None:
    """The model's hidden size as transformers reads it for DeepSpeed: hidden_size, else the largest of hidden_sizes,
    else the same in text_config (multimodal models); None if there is none."""
    for candidate in (model_config, getattr(model_config, "text_config", None)):
        if candidate is None:
            continue
        if hasattr(candidate, "hidden_size"):
            return int(candidate.hidden_size)
        if hasattr(candidate, "hidden_sizes"):
            return int(max(candidate.hidden_sizes))
    return None


class _Filler:
    """transformers' fill_match (`match`) and fill_only (`only`) on one config dict, collecting the mismatches."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.mismatches: list[str] = []

    def match(self, key: str, value: Any, arg_name: str) -> None:
        self._fill(key, value, arg_name)

    def only(self, key: str, value: Any) -> None:
        self._fill(key, value, None)

    def _fill(self, key: str, value: Any, arg_name: str | None) -> None:
        *parents, name = key.split(".")
        node: Any = self.config
        for part in parents:
            node = node.get(part)
            if not isinstance(node, dict):
                return
        current = node.get(name)
        if isinstance(current, str) and current == AUTO:
            node[name] = value
        elif arg_name is not None and current is not None and current != value:
            self.mismatches.append(f"{key}={current} vs {arg_name}={value}")
