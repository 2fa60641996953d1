"""The placement plan: one torch-free answer to where every copy of model state lives (docs/architecture.md)."""
from ._buckets import LATENCY_BOUND_NUMEL, stage3_bucket_cap
from ._build import build_plan, plan_for_config
from ._kinds import Copy, Extent, Lifetime, Location, StepGranularity
from ._plan import DTYPE_BYTES, PlacedCopy, PlacementPlan, PlanInputs
from ._state import optimizer_state_tensors

__all__ = ["Copy", "DTYPE_BYTES", "Extent", "LATENCY_BOUND_NUMEL", "Lifetime", "Location", "PlacedCopy", "PlacementPlan", "PlanInputs",
           "StepGranularity", "build_plan", "optimizer_state_tensors", "plan_for_config", "stage3_bucket_cap"]
