"""`zero_optimization` block (DeepSpeed's runtime/zero/config)."""
from __future__ import annotations

from pydantic import AliasChoices, Field, field_validator, model_validator

from .._ds_defaults import ds_defaults, overlap_comm_default
from ._base import ConfigModel
from ._offload import OffloadOptimizerConfig, OffloadParamConfig
from ._types import Bool, Int, NonNegInt, PositiveInt

# DeepSpeed's defaults, from zero_plugins' ds_defaults.json (which the estimator reads without pydantic).
_ZERO = ds_defaults("zero_optimization")


def _stage3(name: str, *older: str) -> AliasChoices:
    """DeepSpeed accepts stage-3 keys with and without the `stage3_` prefix; our attribute keeps the prefix."""
    return AliasChoices(f"stage3_{name}", name, *older)


class ZeroOptimizationConfig(ConfigModel):
    """Which state is partitioned (stage 0-3), the bucket sizes, stage-3 prefetching and offload."""

    IGNORED = frozenset(
        {
            "use_multi_rank_bucket_allreduce",
            "compute_grad_norm",
            "load_from_fp32_weights",
            "elastic_checkpoint",
            "zenflow",
            "cpu_offload_use_pin_memory",
            "stage3_model_persistence_threshold",
            "model_persistence_threshold",
            "stage3_module_granularity_threshold",
            "module_granularity_threshold",
            "stage3_use_all_reduce_for_fetch_params",
            "use_all_reduce_for_fetch_params",
            "stage3_allgather_sequential",
            "allgather_sequential",
            "ignore_unused_parameters",
            "legacy_stage1",
            "round_robin_gradients",
            "parameter_alignment",
            "zero_hpz_partition_size",
            "zero_quantized_weights",
            "zero_quantized_nontrainable_weights",
            "zero_quantized_gradients",
            "pipeline_loading_checkpoint",
            "override_module_apply",
            "log_trace_cache_warnings",
            "enable_sanity_checks",
            "save_muon_momentum_buffer_in_memory",
            "leaf_module",
        }
    )
    REMOVED = {
        "mics_shard_size": "MiCS sharding was removed from DeepSpeed",
        "mics_hierarchical_params_gather": "MiCS sharding was removed from DeepSpeed",
        "zeropp_loco_param": "LoCo-ZeRO++ was removed from DeepSpeed",
    }
    ZERO_ONLY = frozenset({"step_in_backward"})
    # The Trainer sizes these from the model's hidden size.
    TRAINER_FILLS = frozenset(
        {"reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold"}
    )

    stage: Int = _ZERO["stage"]
    contiguous_gradients: Bool = _ZERO["contiguous_gradients"]
    reduce_scatter: Bool = _ZERO["reduce_scatter"]
    reduce_bucket_size: PositiveInt = _ZERO["reduce_bucket_size"]
    allgather_partitions: Bool = _ZERO["allgather_partitions"]
    allgather_bucket_size: NonNegInt = _ZERO["allgather_bucket_size"]
    # None means DeepSpeed's default, which depends on the stage: on for stage 3 only (resolved below).
    overlap_comm: Bool | None = None
    offload_param: OffloadParamConfig | None = None
    offload_optimizer: OffloadOptimizerConfig | None = None
    sub_group_size: PositiveInt = _ZERO["sub_group_size"]
    # Deprecated booleans of older DeepSpeed releases: true means offload to "cpu".
    cpu_offload: Bool | None = None
    cpu_offload_param: Bool | None = None
    # `default=`, not a positional default: mypy reads pydantic fields through dataclass_transform (PEP 681),
    # which sees only `default=`, and would otherwise take these fields as required.
    stage3_prefetch_bucket_size: NonNegInt = Field(
        default=_ZERO["stage3_prefetch_bucket_size"], validation_alias=_stage3("prefetch_bucket_size")
    )
    stage3_param_persistence_threshold: NonNegInt = Field(
        default=_ZERO["stage3_param_persistence_threshold"],
        validation_alias=_stage3("param_persistence_threshold"),
    )
    stage3_max_live_parameters: NonNegInt = Field(
        default=_ZERO["stage3_max_live_parameters"], validation_alias=_stage3("max_live_parameters")
    )
    stage3_max_reuse_distance: NonNegInt = Field(
        default=_ZERO["stage3_max_reuse_distance"], validation_alias=_stage3("max_reuse_distance")
    )
    stage3_gather_16bit_weights_on_model_save: Bool = Field(
        default=_ZERO["stage3_gather_16bit_weights_on_model_save"],
        validation_alias=_stage3("gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save"),
    )
    memory_efficient_linear: Bool = _ZERO["memory_efficient_linear"]
    # zero's own opt-in (not DeepSpeed's): stage 3 steps each unit as soon as its gradient partition is complete
    # in backward, so no whole gradient partition exists (checked against the rest in _checks.py).
    step_in_backward: Bool = _ZERO["step_in_backward"]

    @field_validator("stage")
    @classmethod
    def _known_stage(cls, stage: int) -> int:
        if stage not in (0, 1, 2, 3):
            raise ValueError("must be 0, 1, 2 or 3")
        return stage

    @model_validator(mode="after")
    def _resolve_defaults(self) -> ZeroOptimizationConfig:
        if self.overlap_comm is None:
            self.overlap_comm = overlap_comm_default(self.stage)
            # Still "not given" in model_fields_set: the estimator re-derives it at each stage it estimates.
            self.__pydantic_fields_set__.discard("overlap_comm")
        self._take_legacy("cpu_offload", "offload_optimizer", OffloadOptimizerConfig)
        self._take_legacy("cpu_offload_param", "offload_param", OffloadParamConfig)
        return self

    def _take_legacy(self, old: str, new: str,
                     block: type[OffloadOptimizerConfig] | type[OffloadParamConfig]) -> None:
        if old not in self.model_fields_set:
            return
        # As DeepSpeed does: the old and the new key together are ambiguous.
        if new in self.model_fields_set:
            raise ValueError(f"{old} (deprecated) and {new} are both given; keep only {new}")
        if getattr(self, old):
            setattr(self, new, block(device="cpu"))
