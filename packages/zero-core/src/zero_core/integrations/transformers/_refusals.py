"""Trainer settings ZeroTrainer refuses, each with one error naming it and the way out (docs/integrations.md).

They would put another engine or wrapper around the model (DeepSpeed, FSDP, DataParallel, torch.compile,
tensor parallelism), or need the Trainer to do something the engine does inside its own step (rebuild the
wrapper at a smaller batch, step the optimizer from backward, step the LR scheduler on metrics).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._auto_values import ZeroTrainerError

if TYPE_CHECKING:
    from transformers import TrainingArguments


def refuse_arguments(args: TrainingArguments, zero_config: Mapping[str, Any]) -> None:
    """Checked before the Trainer builds its Accelerator, so no DeepSpeed or FSDP plugin is ever made."""
    for wrong, problem in (
        (args.deepspeed is not None or args.deepspeed_plugin is not None,
         "TrainingArguments(deepspeed=...) (or ACCELERATE_USE_DEEPSPEED) would run DeepSpeed's engine beside zero's; "
         "pass the ds_config as ZeroTrainer(zero_config=...) only"),
        (bool(args.fsdp) or args.fsdp_plugin_args is not None,
         "fsdp shards the model a second time; remove fsdp and fsdp_config from TrainingArguments"),
        (args.parallelism_config is not None,
         "parallelism_config (tensor, context or sequence parallelism) is not supported; remove it"),
        (args.n_gpu > 1,
         f"n_gpu={args.n_gpu} would wrap the model in DataParallel; start one process per GPU with torchrun"),
        (args.auto_find_batch_size,
         "auto_find_batch_size rebuilds the model's wrapper at each batch size it tries; set "
         "per_device_train_batch_size instead"),
        (args.torch_compile,
         "torch_compile: the engine runs its hooks around the model uncompiled; remove torch_compile"),
        (args.optim in ("lomo", "adalomo"),
         f"optim={_name(args.optim)} updates the weights inside backward, where the engine reduces gradients; choose "
         "another optim"),
        (args.lr_scheduler_type in ("reduce_lr_on_plateau", "greedy") and "scheduler" not in zero_config,
         f"lr_scheduler_type={_name(args.lr_scheduler_type)} steps on evaluation metrics, but the engine steps the LR "
         "scheduler with the optimizer; choose another lr_scheduler_type, or a scheduler block in zero_config"),
        (args.fp16_full_eval or args.bf16_full_eval,
         "fp16_full_eval/bf16_full_eval cast the model for evaluation, but the engine evaluates in the config's "
         "dtype; remove them and set fp16 or bf16"),
        (args.save_only_model and args.load_best_model_at_end,
         "load_best_model_at_end loads the best engine checkpoint, which save_only_model leaves out; drop one of them"),
        (args.save_on_each_node,
         "save_on_each_node: zero's checkpoints and save_model are written once, to storage every rank reads; "
         "remove save_on_each_node"),
    ):
        if wrong:
            raise ZeroTrainerError(f"ZeroTrainer: {problem}")


def refuse_trainer(trainer: Any, zero_config: Mapping[str, Any]) -> None:
    """Checked once the Trainer is built: what an accelerate launcher or the model brought, and `optimizers=`."""
    model = trainer.model
    for wrong, problem in (
        (trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled,
         "the accelerate launcher turned on DeepSpeed or FSDP; launch with torchrun, or `accelerate launch` without "
         "--use_deepspeed/--use_fsdp"),
        ((getattr(model, "tp_size", None) or 1) > 1 or trainer.is_distributed_loading_by_transformers,
         "the model was sharded by from_pretrained (tp_plan or distributed_config); load it whole, or partitioned "
         "inside zero_init(...) at stage 3"),
        (trainer.optimizer is not None and "optimizer" in zero_config,
         "optimizers=(optimizer, ...) and an optimizer block in zero_config name two optimizers; remove one"),
        (trainer.lr_scheduler is not None and "scheduler" in zero_config,
         "optimizers=(..., lr_scheduler) and a scheduler block in zero_config name two schedulers; remove one"),
    ):
        if wrong:
            raise ZeroTrainerError(f"ZeroTrainer: {problem}")


def _name(choice: Any) -> str:
    """An argument as the user wrote it: TrainingArguments turns the strings into enums."""
    return str(getattr(choice, "value", choice))
