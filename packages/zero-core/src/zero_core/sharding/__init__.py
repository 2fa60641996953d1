"""The building blocks every ZeRO stage shares, and stages 0-2's builder (docs/architecture.md).

Stage policies, flat layouts and storage, fp32 master weights, gradient buckets and their
reduction, the optimizer wrapper, loss scaling and schedulers, and the build steps every
stage's builder takes. Stage 3 (zero_core.stage3) builds on these; the engine
(zero_core.engine) assembles them.
"""
from ._bucket import LayoutBucket, ReduceBucket, WholeGradBucket
from ._build_optimizer import OptimizerFactory, build_optimizer
from ._build_steps import (
    BuildContext,
    broadcast_initial_weights,
    place_buffers,
    place_frozen,
)
from ._dtypes import COMPUTE_DTYPES
from ._flat_build import build_flat_state
from ._flat_params import FlatParams
from ._grads import GradBuckets
from ._groups import ShardedGroup, in_gradient_order, layout_buckets
from ._layout import FlatLayout, ShardPiece, Slot, split_into_buckets
from ._home import DeviceHome, Home, HostHome
from ._master import Master, MasterParams, copy_owned, owned_range
from ._master_homes import MasterCopy, MasterHome
from ._names import name_parameters, param_name
from ._optimizer import ZeroOptimizer
from ._packed_bucket import PackedBucket, pack_buckets
from ._param_groups import ParamGroup, resolve_param_groups
from ._homes import Homes, build_homes
from ._policy import GradReduction, StagePolicy, policy_for
from ._sub_groups import StepsGivenParams, step_by_sub_group, step_one
from ._reducer import GradReducer
from ._state import ShardedState, TrainingPasses, WholeParameterPasses
from ._storage import FlatStorage
from ._swap_pool import SwappedTensor, SwapPool
from ._swapped_master import SwappedMaster

__all__ = [
    "COMPUTE_DTYPES",
    "BuildContext",
    "DeviceHome",
    "FlatLayout",
    "FlatParams",
    "FlatStorage",
    "GradBuckets",
    "GradReducer",
    "GradReduction",
    "Home",
    "Homes",
    "HostHome",
    "LayoutBucket",
    "Master",
    "MasterCopy",
    "MasterHome",
    "MasterParams",
    "OptimizerFactory",
    "PackedBucket",
    "ParamGroup",
    "ReduceBucket",
    "ShardPiece",
    "ShardedGroup",
    "ShardedState",
    "SwapPool",
    "SwappedMaster",
    "SwappedTensor",
    "Slot",
    "StagePolicy",
    "StepsGivenParams",
    "TrainingPasses",
    "WholeGradBucket",
    "WholeParameterPasses",
    "ZeroOptimizer",
    "broadcast_initial_weights",
    "copy_owned",
    "build_flat_state",
    "build_homes",
    "build_optimizer",
    "in_gradient_order",
    "layout_buckets",
    "name_parameters",
    "owned_range",
    "pack_buckets",
    "param_name",
    "place_buffers",
    "place_frozen",
    "policy_for",
    "step_by_sub_group",
    "step_one",
    "resolve_param_groups",
    "split_into_buckets",
]
