"""ZeroConfig: the whole ds_config, with DeepSpeed's top-level key names and defaults."""
from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field, PrivateAttr, field_validator

from ._activation import ActivationCheckpointingConfig
from ._aio import AioConfig
from ._base import ConfigModel
from ._checkpoint import CheckpointConfig
from ._nonfinite import NonFiniteStepsConfig
from ._optim import OptimizerConfig, SchedulerConfig
from ._precision import BF16Config, FP16Config
from ._types import Bool, NonNegFloat, PositiveInt
from ._zero import ZeroOptimizationConfig


class ZeroConfig(ConfigModel):
    """A DeepSpeed ds_config as zero reads it. Build it with `load_config`, which also checks across blocks."""

    IGNORED = frozenset(
        {
            "autotuning",
            "comet",
            "comms_logger",
            "communication_data_type",
            "compile",
            "csv_monitor",
            "data_efficiency",
            "data_types",
            "dataloader_drop_last",
            "datastates_ckpt",
            "disable_allgather",
            "disable_python_gc",
            "dump_state",
            "expert_parallel",
            "flops_profiler",
            "gradient_allreduce_op",
            "gradient_predivide_factor",
            "hybrid_engine",
            "log_level",
            "managed_gradient_accumulation",
            "memory_breakdown",
            "pipeline",
            "prescale_gradients",
            "seq_parallel_communication_data_type",
            "sequence_parallel_size",
            "tensor_parallel",
            "tensorboard",
            "timers",
            "torch_autocast",
            "use_data_before_expert_parallelism",
            "vocabulary_size",
            "wandb",
            "weight_quantization",
            "zero_allow_untested_optimizer",
            "zero_force_ds_cpu_optimizer",
        }
    )
    REMOVED = {
        "amp": "Apex AMP was removed from DeepSpeed; use fp16 or bf16",
        "compression_training": "the compression library was removed from DeepSpeed",
        "curriculum_learning": "the top-level curriculum_learning block was removed from DeepSpeed",
        "eigenvalue": "eigenvalue-based MoQ was removed from DeepSpeed",
        "elasticity": "elastic training was removed from DeepSpeed; set the batch sizes directly",
        "graph_harvesting": "graph harvesting was removed from DeepSpeed",
        "nebula": "Nebula checkpointing was removed from DeepSpeed",
        "progressive_layer_drop": "progressive layer dropping was removed from DeepSpeed",
        "quantize_training": "MoQ quantized training was removed from DeepSpeed",
        "sparse_attention": "sparse attention was removed from DeepSpeed",
        "sparse_gradients": "sparse embedding-gradient compression was removed from DeepSpeed",
    }
    ZERO_ONLY = frozenset({"non_finite_steps", "keys_deepspeed_lacks"})
    TRAINER_FILLS = frozenset(
        {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping"}
    )

    # None: not given; `load_config(..., world_size=N)` fills it from the other two, as DeepSpeed does.
    train_batch_size: PositiveInt | None = None
    train_micro_batch_size_per_gpu: PositiveInt | None = None
    gradient_accumulation_steps: PositiveInt | None = None
    # DeepSpeed 0.19 clips at global norm 1.0 unless told otherwise; 0 turns clipping off.
    gradient_clipping: NonNegFloat = 1.0
    fp16: FP16Config = Field(default_factory=FP16Config)
    # `bfloat16` is the block's older name, still read by DeepSpeed.
    bf16: BF16Config = Field(default_factory=BF16Config, validation_alias=AliasChoices("bf16", "bfloat16"))
    optimizer: OptimizerConfig | None = None
    scheduler: SchedulerConfig | None = None
    zero_optimization: ZeroOptimizationConfig = Field(default_factory=ZeroOptimizationConfig)
    aio: AioConfig = Field(default_factory=AioConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    # None: the block is absent, and initialize leaves zero_core.checkpointing as it is.
    activation_checkpointing: ActivationCheckpointingConfig | None = None
    # zero's own: when steps skipped for non-finite gradients should stop the run.
    non_finite_steps: NonFiniteStepsConfig = Field(default_factory=NonFiniteStepsConfig)
    # zero's own: the dotted paths of this file's keys that DeepSpeed does not have (`zero plan --write` lists
    # them, so a DeepSpeed run knows what to delete). Read and otherwise ignored; DeepSpeed skips it.
    keys_deepspeed_lacks: list[str] = Field(default_factory=list)
    # None: never print (DeepSpeed 0.19's default).
    steps_per_print: PositiveInt | None = None
    wall_clock_breakdown: Bool = False

    _ignored_keys: list[str] = PrivateAttr(default_factory=list)

    @field_validator("aio", mode="before")
    @classmethod
    def _null_aio_is_default(cls, value: object) -> object:
        # DeepSpeed reads `"aio": null` as "use the defaults".
        return {} if value is None else value

    @field_validator("steps_per_print", mode="before")
    @classmethod
    def _infinity_is_never(cls, value: object) -> object:
        # accelerate (under the HF Trainer too) writes float("inf") to keep DeepSpeed from printing.
        return None if value == float("inf") else value

    @property
    def compute_dtype(self) -> Literal["fp16", "bf16", "fp32"]:
        """The dtype of parameters, gradients and activations in forward and backward."""
        if self.fp16.enabled:
            return "fp16"
        if self.bf16.enabled:
            return "bf16"
        return "fp32"

    @property
    def ignored_keys(self) -> list[str]:
        """JSON paths of the keys that were accepted and ignored, in the order they were found."""
        return list(self._ignored_keys)
