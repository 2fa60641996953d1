"""What the CPU optimizers share: param checks, state creation, and dispatch to the fused op or a torch kernel."""
from __future__ import annotations

from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Iterable
from itertools import chain
from types import ModuleType
from typing import Any, overload

import torch
from zero_core.memory import is_fake

from ._fp32 import step_widened
from ._lists import Kernel, StepLists
from ._native import STORAGE_CODES, cpu_optimizer_op

# One call of the fused op (see _native) over StepLists of one param dtype, given its storage code.
NativeKernel = Callable[[int, StepLists], None]

_SIXTEEN_BIT = (torch.float16, torch.bfloat16)


class CPUOptimizer(torch.optim.Optimizer, metaclass=ABCMeta):
    """A torch optimizer over dense, contiguous CPU tensors whose step is one kernel call per param group
    and param dtype.

    Subclasses name their state tensors and build two kernels for a group: the fused op's, for
    fp32, bf16 and fp16 params with fp32 states, and torch's, for the rest (fp64 params, 16-bit
    states) and wherever the op is off or cannot build (see _native). State is created on a
    param's first step, zero-filled, with a float32 `step` count, as torch's optimizers keep it.
    """

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any], *, fp32_optimizer_states: bool) -> None:
        self._check_group(defaults)  # before torch's own checks of the params, so a bad value is named first
        self.fp32_optimizer_states = fp32_optimizer_states
        self._given: dict[str, Any] | None = None  # the one group `step` steps inside step_params
        super().__init__(params, defaults)

    @abstractmethod
    def _check_group(self, group: dict[str, Any]) -> None:
        """Raise ValueError, naming the argument, if a group's hyperparameters are out of range."""

    @abstractmethod
    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        """The state tensors kept per param, shaped like it, in the order the kernel takes them."""

    @abstractmethod
    def _kernel(self, group: dict[str, Any]) -> Kernel:
        """One call of torch's kernels for the update over StepLists, with `group`'s hyperparameters."""

    @abstractmethod
    def _native_kernel(self, op: ModuleType, group: dict[str, Any]) -> NativeKernel:
        """One call of the fused op for the update, with `group`'s hyperparameters."""

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        params = param_group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        for param in params:
            _check_param(param)
        self._check_group({**self.defaults, **param_group})
        super().add_param_group({**param_group, "params": params})

    def _state_dtype(self, param: torch.Tensor) -> torch.dtype:
        """fp32 for 16-bit params when fp32_optimizer_states is set, else the param's own dtype."""
        if self.fp32_optimizer_states and param.dtype in _SIXTEEN_BIT:
            return torch.float32
        return param.dtype

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        groups = self.param_groups if self._given is None else [self._given]
        if any(param.grad is not None for group in groups for param in group["params"]):
            op = cpu_optimizer_op()  # builds on the first step; warns once if it cannot
            with torch.no_grad():
                for group in groups:
                    self._step_group(group, op)
        return loss

    def step_params(self, group_index: int, params: list[torch.Tensor]) -> None:
        """Step `params` (the engine's sub-group views of the masters) with param group `group_index`'s settings, in
        one kernel call per storage type, as `step` steps a whole group (zero_core's StepsGivenParams). It goes
        through `step`, so step hooks and LR schedulers see a step; `param_groups` is left as it is."""
        self._given = {**self.param_groups[group_index], "params": params}
        try:
            self.step()
        finally:
            self._given = None

    def _step_group(self, group: dict[str, Any], op: ModuleType | None) -> None:
        names = self._state_names(group)
        same_dtype, widened = StepLists([[] for _ in names]), StepLists([[] for _ in names])
        native: dict[int, StepLists] = {}  # storage code -> params for the fused op
        for param in group["params"]:
            if param.grad is None:
                continue
            grad = _dense_grad(param)
            state = self.state[param]
            if "step" not in state:
                state["step"] = torch.tensor(0.0, dtype=torch.float32)
            dtype = self._state_dtype(param)
            for name in names:
                if name not in state:  # also covers amsgrad switched on after the first step
                    state[name] = torch.zeros(param.shape, dtype=dtype)
            if op is not None and dtype == torch.float32 and param.dtype in STORAGE_CODES:
                lists = native.setdefault(STORAGE_CODES[param.dtype], StepLists([[] for _ in names]))
            else:
                lists = same_dtype if dtype == param.dtype else widened
            lists.append(param, grad, [state[name] for name in names], state["step"])
        all_lists = [same_dtype, widened, *native.values()]
        steps = [step for lists in all_lists for step in lists.steps]
        if not steps:
            return
        torch._foreach_add_(steps, 1.0)
        # A dry run's fake tensors have no data for the op to read; it allocates nothing, so skipping it changes
        # no figure the dry run measures.
        if op is not None and native and not is_fake(next(iter(native.values())).params[0]):
            native_kernel = self._native_kernel(op, group)
            for storage, lists in native.items():
                native_kernel(storage, lists)
        if same_dtype.params or widened.params:
            kernel = self._kernel(group)
            if same_dtype.params:
                kernel(same_dtype)
            if widened.params:
                step_widened(kernel, widened)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        for group in self.param_groups:  # a torch.optim.AdamW dict has no bias_correction, say
            for name, default in self.defaults.items():
                group.setdefault(name, default)
        # torch casts every loaded state tensor to its param's dtype; take fp32 states of 16-bit
        # params from the saved dict again so that they keep their precision.
        saved_ids = chain.from_iterable(group["params"] for group in state_dict["param_groups"])
        params = chain.from_iterable(group["params"] for group in self.param_groups)
        for saved_id, param in zip(saved_ids, params):
            saved = state_dict["state"].get(saved_id)
            if saved is None:
                continue
            state, dtype = self.state[param], self._state_dtype(param)
            for name, value in saved.items():
                if name == "step":  # DeepSpeed saves an int; the kernels take a float32 tensor
                    state[name] = torch.tensor(float(value), dtype=torch.float32)
                elif isinstance(value, torch.Tensor) and (state[name].dtype != dtype
                                                          or not state[name].is_contiguous()):
                    state[name] = value.to(dtype=dtype, memory_format=torch.contiguous_format, copy=True)


def _check_param(param: object) -> None:
    if not isinstance(param, torch.Tensor):
        raise TypeError(f"params must be tensors, got {type(param).__name__}")
    if param.device.type != "cpu":
        raise ValueError(f"CPU optimizers step CPU tensors; got a param on {param.device} "
                         "(offload the optimizer to CPU, or use a GPU optimizer)")
    if not param.is_floating_point():
        raise ValueError(f"params must be floating point, got {param.dtype}")
    if param.layout != torch.strided or not param.is_contiguous():
        raise ValueError("params must be dense and contiguous (the kernels walk them as flat arrays); "
                         "pass param.contiguous() or a flat buffer")


def _dense_grad(param: torch.Tensor) -> torch.Tensor:
    grad = param.grad
    assert grad is not None
    if grad.is_sparse:
        raise ValueError("CPU optimizers take dense grads; this param's grad is sparse")
    if grad.shape != param.shape or grad.dtype != param.dtype:
        raise ValueError(f"a grad must match its param: grad {grad.dtype}{list(grad.shape)} "
                         f"for param {param.dtype}{list(param.shape)}")
    # The kernels read grads as flat arrays too.
    return grad if grad.is_contiguous() else grad.contiguous()
