"""The order of the training loop's calls, checked: misuse is one clear error, not a silent wrong step."""
from __future__ import annotations

from zero_plugins import ZeroError


class EngineMisuse(ZeroError, RuntimeError):
    """A call out of the training loop's order (step without backward, use after destroy, ...)."""


class CallOrder:
    """`backward` then `step`, once per micro-batch; nothing after `destroy`."""

    def __init__(self) -> None:
        self.backward_pending = False  # a backward whose step has not come yet
        self.destroyed = False

    def check_alive(self, call: str) -> None:
        if self.destroyed:
            raise EngineMisuse(f"engine.{call}() after engine.destroy(): the engine's hooks and buffers are gone; "
                               "call zero_core.initialize again for a new engine")

    def backward(self) -> None:
        self.check_alive("backward")
        if self.backward_pending:
            raise EngineMisuse("engine.backward() twice without engine.step() between: call step() after every "
                               "backward (it counts the micro-batch; the optimizer steps only at the gradient "
                               "accumulation boundary), or sum the losses and call backward once")
        self.backward_pending = True

    def step(self) -> None:
        self.check_alive("step")
        if not self.backward_pending:
            raise EngineMisuse("engine.step() without engine.backward(loss) since the last step: there are no "
                               "gradients of this micro-batch to step with; call backward first")
        self.backward_pending = False
