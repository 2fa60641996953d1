"""ZeroTrainer: transformers.Trainer with the model trained by zero's engine (docs/integrations.md).

The Trainer's own loop runs unchanged (`_inner_training_loop`, `_run_epoch`, `training_step`, evaluation); the
overrides below hand the engine what the Trainer would do to the model itself:

| Trainer step | DeepSpeed's Trainer | ZeroTrainer |
|---|---|---|
| wrap the model (`_wrap_model`) | `accelerator.prepare` -> `deepspeed.initialize` | `zero_core.initialize`; `prepare` then sees only the optimizer view |
| `accelerator.backward(loss)` | engine backward, step at the boundary | the same (`_engine_backward`) |
| clip, grad norm | the engine's | the engine's (`get_global_grad_norm`) |
| optimizer / scheduler step | no-op wrappers | no-op views (_engine_parts.py) |
| checkpoint | `engine.save_checkpoint(checkpoint-N)` | the same |
| resume | `engine.load_checkpoint` | the same |
| `save_model` at stage 3 | 16-bit gathered if the config says so | the same |

transformers' DeepSpeed switch (`is_deepspeed_enabled`, the zero3 weakref that `from_pretrained` reads) stays off.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, cast

import torch
from transformers import Trainer, TrainingArguments
from transformers.trainer_utils import TrainOutput
from transformers.utils import SAFE_WEIGHTS_NAME, WEIGHTS_NAME

from zero_plugins.ds_config import IgnoredConfigKeysWarning, load_config
from ...engine import ZeroEngine, initialize
from ...stage3 import Init
from ._auto_values import ZeroTrainerError, resolve_config
from ._config_source import ConfigSource, read_zero_config
from ._engine_parts import EngineOptimizer, EngineScheduler, evaluation_config
from ._refusals import refuse_arguments, refuse_trainer

# Trainer methods overridden or called here: with a transformers that lacks one, an override would never run.
_OVERRIDDEN = ("create_accelerator_and_postprocess", "_build_accelerator_args", "_move_model_to_device", "_wrap_model",
               "_clip_grad_norm", "_get_grad_norm", "_prepare_input", "_save_optimizer_and_scheduler",
               "_load_from_checkpoint", "_load_optimizer_and_scheduler", "_load_best_model", "_save")
if missing := [name for name in _OVERRIDDEN if not hasattr(Trainer, name)]:
    raise ImportError(f"ZeroTrainer overrides Trainer.{', Trainer.'.join(missing)}, which this transformers lacks; "
                      "pip install -U transformers")


class ZeroTrainer(Trainer):
    """`transformers.Trainer` training on zero's engine: `ZeroTrainer(model=..., args=..., zero_config="ds.json")`.

    `zero_config` is a ds_config path or dict; its "auto" values are filled from `args` and the model
    as transformers fills them for DeepSpeed, and a value that disagrees with `args` is one error naming both.
    The engine is built by `train()` (each call builds its own), or by `evaluate`, `predict` or `save_model` when
    one comes first (an engine that only evaluates, which `train()` replaces).
    """

    def __init__(self, *args: Any, zero_config: ConfigSource, **kwargs: Any) -> None:
        self._zero_source = read_zero_config(zero_config)
        self._engine: ZeroEngine | None = None
        self._engine_trains = False
        self._schedule_view: EngineScheduler | None = None
        super().__init__(*args, **kwargs)
        refuse_trainer(self, self._zero_source)
        self._client_optimizers = self.optimizer is not None or self.lr_scheduler is not None
        self._stage = self._check_config()
        # training_step ends in accelerator.backward(loss), and compute_loss unwraps the model to read its class
        # (label smoothing): both must reach the engine. The Accelerator is this Trainer's own.
        self.accelerator.backward = self._engine_backward
        unwrap = self.accelerator.unwrap_model
        self.accelerator.unwrap_model = lambda model, *a, **k: unwrap(
            model.module if isinstance(model, ZeroEngine) else model, *a, **k)

    @property
    def engine(self) -> ZeroEngine | None:
        """zero's engine around the model (run `engine.generate(...)` through it at stage 3); None before one is built."""
        return self._engine

    # --- construction ---
    def create_accelerator_and_postprocess(self) -> None:
        refuse_arguments(self.args, self._zero_source)  # before accelerate builds a DeepSpeed or FSDP plugin
        super().create_accelerator_and_postprocess()

    def _build_accelerator_args(self, **kwargs: Any) -> dict[str, Any]:
        args = super()._build_accelerator_args(**kwargs)
        args["mixed_precision"] = "no"  # the engine computes in the config's dtype: no autocast, no GradScaler
        return args

    def _move_model_to_device(self, model: torch.nn.Module, device: torch.device) -> None:
        """Nothing: the engine places the model (at stage 3, as partitions)."""

    def _check_config(self) -> int:
        """Reads zero_config now, so that a wrong value fails here rather than in train(); returns the stage."""
        config = resolve_config(self._zero_source, self.args, getattr(self.model, "config", None))
        config.pop("scheduler", None)  # its step counts are known in train()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IgnoredConfigKeysWarning)  # initialize warns about them once
            return load_config(config, world_size=self.args.world_size).zero_optimization.stage

    # --- the engine ---
    def train(self, *args: Any, **kwargs: Any) -> TrainOutput:
        # Each train() gets an engine for its own schedule, as DeepSpeed's Trainer initializes DeepSpeed again.
        self._release_engine()
        output: TrainOutput = super().train(*args, **kwargs)
        return output

    def _wrap_model(self, model: torch.nn.Module, training: bool = True, dataloader: Any = None) -> torch.nn.Module:
        # The engine takes the place of DDP, DataParallel and accelerate's prepare_model; since it is not
        # self.model, the Trainer then prepares only the optimizer view.
        if training:
            return self._build_engine(training=True)
        return self._engine if self._engine is not None else self._build_engine(training=False)

    def _build_engine(self, training: bool) -> ZeroEngine:
        max_steps = self.state.max_steps if training else None
        config = resolve_config(self._zero_source, self.args, getattr(self.model, "config", None), max_steps)
        optimizer: Any = None  # evaluation_config has no optimizer block: a forward-only engine
        scheduler: Any = None
        if training:
            # Trainer.create_optimizer() has just run; the config's blocks, when present, win (DeepSpeed's rule).
            optimizer = None if "optimizer" in config else self.optimizer
            if "scheduler" not in config:
                scheduler = self.lr_scheduler if self.lr_scheduler is not None else self._create_scheduler
        else:
            config = evaluation_config(config, self._model())
        engine, engine_optimizer, _, _ = initialize(model=self.model, optimizer=optimizer, lr_scheduler=scheduler,
                                                    config=config)
        if training:
            self._schedule_view = EngineScheduler(engine)
            # Views, not torch objects: the loop only steps them and reads their rates (_engine_parts.py).
            self.optimizer = EngineOptimizer(engine_optimizer)  # type: ignore[assignment]
            self.lr_scheduler = self._schedule_view  # type: ignore[assignment]
        self._engine, self._engine_trains, self.model_wrapped = engine, training, engine
        return engine

    def _create_scheduler(self, optimizer: torch.optim.Optimizer) -> Any:
        """Trainer.create_scheduler (or a subclass's) on the engine's torch optimizer, for this run's step count."""
        return self.create_scheduler(self.state.max_steps, optimizer=optimizer)

    def _release_engine(self) -> None:
        if self._engine is None:
            return
        if self._engine_trains and self._client_optimizers:
            raise ZeroTrainerError("ZeroTrainer: train() ran before with the optimizer given as optimizers=(...), which "
                                   "stepped in that run's engine; pass optimizer_cls_and_kwargs instead, or build a "
                                   "new ZeroTrainer")
        self._engine.destroy()
        if self._engine_trains:
            self.optimizer, self.lr_scheduler = None, None  # the Trainer builds new ones for the new engine
        self._engine, self._engine_trains, self._schedule_view, self.model_wrapped = None, False, None, self._model()

    def _model(self) -> torch.nn.Module:
        return cast(torch.nn.Module, self.model)  # Trainer.__init__ refuses to run without a model

    def _training_engine(self) -> ZeroEngine:
        if self._engine is None or not self._engine_trains:
            raise ZeroTrainerError("ZeroTrainer: a training step outside train(); the engine that trains is built "
                                   "by train()")
        return self._engine

    # --- one micro-batch ---
    def _engine_backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """accelerator.backward as training_step calls it: the engine's backward, then its step, which applies the
        optimizer step at the boundary the Trainer's loop decides (kwargs are only LOMO's, refused)."""
        engine = self._training_engine()
        boundary = bool(self.accelerator.sync_gradients)
        # The loop ends an epoch with a step even after a short accumulation: the engine follows the loop.
        engine.set_gradient_accumulation_boundary(boundary)
        engine.backward(loss, scale_wrt_gas=False)  # training_step has divided the loss for accumulation
        if boundary and self._schedule_view is not None:
            self._schedule_view.note_step()
        engine.step()

    def _clip_grad_norm(self, model: torch.nn.Module) -> float | None:
        # The engine clipped in its step at gradient_clipping (= max_grad_norm); this is the norm before clipping.
        return self._training_engine().get_global_grad_norm()

    def _get_grad_norm(self, model: torch.nn.Module, grad_norm: Any = None) -> Any:
        return grad_norm if grad_norm is not None else self._training_engine().get_global_grad_norm()

    def _prepare_input(self, data: Any) -> Any:
        prepared = super()._prepare_input(data)
        # Floating inputs in the engine's compute dtype (pixel values into a bf16 model), as DeepSpeed's Trainer does.
        if isinstance(prepared, torch.Tensor) and prepared.is_floating_point() and self._engine is not None:
            return prepared.to(self._engine.compute_dtype)
        return prepared

    # --- saving and loading ---
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """A directory `from_pretrained` loads (config.json, model.safetensors) with the engine's whole weights in its
        compute dtype; every rank must call it. At stage 3 the weights are gathered only with
        `zero_optimization.stage3_gather_16bit_weights_on_model_save: true`, as in DeepSpeed; without it the
        directory gets an engine checkpoint instead, and a warning says so."""
        engine = self._engine if self._engine is not None or self._stage < 3 else self._build_engine(training=False)
        if engine is None:  # stages 0-2 before any engine: the model's own weights are whole
            super().save_model(output_dir, _internal_call)
            return
        output_dir = output_dir or str(self.args.output_dir)  # TrainingArguments always sets one
        if self._stage == 3 and not engine.zero_gather_16bit_weights_on_model_save():
            self._save_without_weights(engine, output_dir, _internal_call)
        else:
            self._save(output_dir, state_dict=engine.module_state_dict())
        if self.args.push_to_hub and not _internal_call:
            self.push_to_hub(commit_message="Model save", revision=self.args.hub_revision)

    def _save_without_weights(self, engine: ZeroEngine, output_dir: str, internal_call: bool) -> None:
        if self.args.should_save:
            warnings.warn(f"save_model: {output_dir} gets no model weights, since at stage 3 they are gathered for "
                          "saving only with zero_optimization.stage3_gather_16bit_weights_on_model_save: true; set it, "
                          f"or write them from the engine checkpoint with `zero checkpoint export {output_dir} OUT`",
                          stacklevel=3)
        self._save(output_dir, state_dict={})
        if self.args.should_save:
            for name in (WEIGHTS_NAME, SAFE_WEIGHTS_NAME):  # the empty weights file _save wrote beside config.json
                (Path(output_dir) / name).unlink(missing_ok=True)
        # A Trainer checkpoint gets its engine checkpoint from _save_optimizer_and_scheduler next.
        if not internal_call or self.args.save_only_model:
            engine.save_checkpoint(output_dir)

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        # One engine checkpoint holds the weights, the fp32 master, the optimizer and the LR scheduler.
        self._training_engine().save_checkpoint(output_dir)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: torch.nn.Module | None = None) -> None:
        # train() calls this before the engine exists; the engine loads the checkpoint once built
        # (_load_optimizer_and_scheduler). Here only check that there is one.
        if not (Path(resume_from_checkpoint) / "latest").is_file():
            raise ZeroTrainerError(f"ZeroTrainer: {resume_from_checkpoint} holds no engine checkpoint (no 'latest' "
                                   "file) to resume from; resume from a checkpoint ZeroTrainer saved, or load these "
                                   "weights with from_pretrained and start a new run")

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        if checkpoint is not None:
            self._training_engine().load_checkpoint(checkpoint)

    def _load_best_model(self) -> None:
        # Training is over: the best checkpoint's weights (and their fp32 master), not its optimizer state.
        best = self.state.best_model_checkpoint
        if best is not None:
            self._training_engine().load_checkpoint(best, load_module_only=True)


def zero_init(zero_config: ConfigSource, args: TrainingArguments, model_config: Any = None) -> Init:
    """`zero_core.Init` for a model that a ZeroTrainer will train at stage 3: build it, or `from_pretrained` it, in
    `with zero_init(zero_config, args):` to partition it while it loads, then give ZeroTrainer the same zero_config
    and args. "auto" is filled from `args`, and from `model_config` (`AutoConfig.from_pretrained(name)`) for the
    hidden-size keys, so that Init keeps whole the parameters the engine will (without it Init reads them as
    defaults, and the engine regroups the partitions). The optimizer and scheduler blocks, which Init does not
    read, are left out: ZeroTrainer fills them when it trains."""
    config = resolve_config(read_zero_config(zero_config), args, model_config)
    return Init(config={key: value for key, value in config.items() if key not in ("optimizer", "scheduler")})
