"""What the training loop is given, checked where a wrong input would otherwise train silently: an empty batch,
a loss with no path to the trained parameters or reduced over zero elements, and parameters frozen or unfrozen
after `initialize` (docs/reliability.md, "Inputs that would train silently")."""
from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from zero_plugins import ZeroError

from ..memory import read_bool

_FIX_TRAINABLE = ("set requires_grad before zero_core.initialize, or call engine.destroy() and initialize the model "
                  "again")


class TrainableSet:
    """Which parameters train is fixed at initialize: their gradient buffers, hooks and optimizer state are built
    then. Checked at each backward, in the order of model.named_parameters() (a Python loop over the parameters)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self._params = [(fqn, param, param.requires_grad) for fqn, param in module.named_parameters()]

    def check(self) -> None:
        for fqn, param, trained in self._params:
            if param.requires_grad and not trained:
                raise ZeroError(f"parameter {fqn} was unfrozen (requires_grad set to True) after zero_core.initialize: "
                                "the engine holds no gradient buffer or optimizer state for it, so it would be "
                                f"computed but never updated; {_FIX_TRAINABLE}")
            if trained and not param.requires_grad:
                raise ZeroError(f"parameter {fqn} was frozen (requires_grad set to False) after zero_core.initialize: "
                                "the engine still holds its optimizer state and steps it (momentum and weight decay "
                                f"would go on changing it); {_FIX_TRAINABLE}")


def check_batch(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Refuse an input tensor with no elements (an empty batch): its loss is NaN, its gradients zero, and the step
    would apply as if it were a normal batch."""
    for name, value in _inputs(args, kwargs):
        if value.ndim > 0 and value.numel() == 0:
            raise ZeroError(f"engine forward: input {name} is empty (shape {tuple(value.shape)}): an empty batch "
                            "gives a NaN loss and zero gradients, and the step would apply as if it were a normal "
                            "one; leave empty batches out before calling the engine (e.g. DataLoader(drop_last=True))")


def _inputs(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors given to forward, named as the caller wrote them: directly, or one level inside a dict (a
    tokenizer's batch), a list or a tuple."""
    given = [(f"argument {index}", value) for index, value in enumerate(args)]
    for name, value in [*given, *kwargs.items()]:
        if isinstance(value, torch.Tensor):
            yield name, value
        elif isinstance(value, Mapping):
            yield from ((f"{name}[{key!r}]", item) for key, item in value.items() if isinstance(item, torch.Tensor))
        elif isinstance(value, (list, tuple)):
            yield from ((f"{name}[{index}]", item) for index, item in enumerate(value)
                        if isinstance(item, torch.Tensor))


def check_loss(loss: torch.Tensor) -> None:
    """Refuse a loss autograd cannot differentiate, before the backward runs."""
    if loss.grad_fn is None:
        raise ZeroError("engine.backward(loss): the loss has no autograd graph (grad_fn is None: computed under "
                        "torch.no_grad(), detached, or a constant), so no parameter would get a gradient; compute it "
                        "from the engine's forward output, outside torch.no_grad()")


def check_reached(gradients: int) -> None:
    """After the backward: `gradients` is how many trainable parameters received one."""
    if gradients == 0:
        raise ZeroError("engine.backward(loss): no gradient reached any trainable parameter: the loss does not "
                        "depend on the parameters being trained (it was computed from the inputs, from detached "
                        "outputs or from frozen parameters only), and the step would apply zero gradients; compute "
                        "the loss from the engine's forward output")


class LossWatch:
    """Whether a loss since the last optimizer step was NaN, kept on the device (reading it would wait for the
    device at every backward) and read only when the step is about to apply."""

    def __init__(self) -> None:
        self._nan: torch.Tensor | None = None

    def add(self, loss: torch.Tensor) -> None:
        nan = torch.isnan(loss.detach()).any()
        self._nan = nan if self._nan is None else self._nan | nan

    def reset(self) -> None:
        self._nan = None

    def check(self, step: int) -> None:
        """Called once the step's gradients are known to be finite, before anything is updated."""
        nan, self._nan = self._nan, None
        if nan is not None and read_bool(nan, if_fake=False):
            # NaN with finite gradients is 0/0: a mean over no elements, whose gradients are all zero.
            raise ZeroError(f"step {step}: a loss since the last step was NaN while every gradient is finite: it was "
                            "reduced over zero elements (an empty batch, or every label ignored), and the step would "
                            "apply as if the batch were normal; it was not applied; leave such micro-batches out "
                            "before engine.backward (and call engine.zero_grad() to go on)")


def check_lr_kwargs(scheduler: Any, lr_kwargs: dict[str, Any] | None) -> None:
    """`engine.step(lr_kwargs=...)` goes to the scheduler's step after the optimizer's: a key it does not take would
    raise with the weights already updated, so the keys are checked against its signature first."""
    if not lr_kwargs:
        return
    if scheduler is None:
        raise ZeroError(f"engine.step(lr_kwargs={sorted(lr_kwargs)}) but the engine has no LR scheduler to pass them "
                        "to; add a scheduler block to the config (or lr_scheduler= to initialize), or drop lr_kwargs")
    try:
        inspect.signature(scheduler.step).bind(**lr_kwargs)
    except TypeError as error:
        raise ZeroError(f"engine.step(lr_kwargs={sorted(lr_kwargs)}): {type(scheduler).__name__}.step "
                        f"{inspect.signature(scheduler.step)} does not take them ({error}); nothing was stepped: pass "
                        "only its parameters") from None
