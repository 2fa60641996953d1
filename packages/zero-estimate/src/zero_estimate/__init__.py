"""zero-estimate: how much memory ZeRO training needs, and which configuration fits; no torch needed.

Two models of memory:
- DeepSpeed's estimator, number for number (`estimate_zero2_*`, `estimate_zero3_*`,
  `model_to_params`), also as `zero_estimate.stage_1_and_2` and `zero_estimate.stage3`;
- our own, copy by copy, per device and per phase (`estimate`, `plan`), in the categories
  of the engine's memory ledger. docs/memory-model.md gives its formulas.
"""
from ._ds_config import load_ds_config, settings_from_ds_config
from ._ds_table import DsRow
from ._ds_write import WrittenConfig, complete_ds_config, save_ds_config
from ._errors import EstimateError
from ._estimate import Estimate, estimate
from ._lines import LOCATIONS, PHASES, Line
from ._plan import Candidate, Limits, Plan, plan
from zero_plugins.model_presets import PRESETS
from ._settings import Cluster, Training, ZeroSettings
from ._sources import from_hf_config, from_module, from_numbers, from_preset
from ._spec import LoraSpec, ModelSpec, ModuleParams, TransformerShape
from ._step_traffic import Rates, StepTraffic, step_traffic
from .__about__ import __version__
from .stage3 import (
    estimate_zero3_model_states_mem_needs,
    estimate_zero3_model_states_mem_needs_all_cold,
    estimate_zero3_model_states_mem_needs_all_live,
    model_to_params,
)
from .stage_1_and_2 import (
    estimate_zero2_model_states_mem_needs,
    estimate_zero2_model_states_mem_needs_all_cold,
    estimate_zero2_model_states_mem_needs_all_live,
)

__all__ = [
    "LOCATIONS",
    "PHASES",
    "PRESETS",
    "Candidate",
    "Cluster",
    "DsRow",
    "Estimate",
    "EstimateError",
    "Limits",
    "Line",
    "LoraSpec",
    "ModelSpec",
    "ModuleParams",
    "Plan",
    "Rates",
    "StepTraffic",
    "Training",
    "TransformerShape",
    "WrittenConfig",
    "ZeroSettings",
    "__version__",
    "complete_ds_config",
    "estimate",
    "estimate_zero2_model_states_mem_needs",
    "estimate_zero2_model_states_mem_needs_all_cold",
    "estimate_zero2_model_states_mem_needs_all_live",
    "estimate_zero3_model_states_mem_needs",
    "estimate_zero3_model_states_mem_needs_all_cold",
    "estimate_zero3_model_states_mem_needs_all_live",
    "from_hf_config",
    "from_module",
    "from_numbers",
    "from_preset",
    "load_ds_config",
    "model_to_params",
    "plan",
    "save_ds_config",
    "settings_from_ds_config",
    "step_traffic",
]
