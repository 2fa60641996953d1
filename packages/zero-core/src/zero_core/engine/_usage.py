"""The order of the training loop's calls, checked: misuse is one clear error, not a silent wrong step."""
from __future__ import annotations

from zero_plugins import ZeroError

from ._whole_step import HalfAppliedStep


class EngineMisuse(ZeroError, RuntimeError):
    """A call out of the training loop's order (step without backward, use after destroy, ...)."""


_READS_WEIGHTS_ONLY = frozenset({"forward", "module_state_dict", "_zero3_consolidated_16bit_state_dict"})


class CallOrder:
    """`backward` then `step`, once per micro-batch; nothing after `destroy`."""

    def __init__(self, *, forward_only: bool = False) -> None:
        self.forward_only = forward_only  # an engine initialize built without an optimizer
        self.backward_pending = False  # a backward whose step has not come yet
        self.accumulated = 0  # micro-batches stepped since the last accumulation boundary: their gradients are held
        self.destroyed = False
        self.states_away: frozenset[str] = frozenset()  # what engine.offload_states() moved off, until reload_states()
        self.half_applied: HalfAppliedStep | None = None  # a step that failed part-way, until a checkpoint is loaded

    def check_alive(self, call: str) -> None:
        if self.destroyed:
            raise EngineMisuse(f"engine.{call}() after engine.destroy(): the engine's hooks and buffers are gone; "
                               "call zero_core.initialize again for a new engine")
        self.check_whole(call)
        self.check_states_present(call)

    def check_whole(self, call: str) -> None:
        """Nothing trains on, saves or exports weights a failed step left half updated."""
        if self.half_applied is not None:
            raise HalfAppliedStep(f"engine.{call}() refused: {self.half_applied}") from self.half_applied

    def check_states_present(self, call: str) -> None:
        """Only the weights (`lp_params`) are needed by a forward or a read of them; training needs every state."""
        needed = self.states_away & {"lp_params"} if call in _READS_WEIGHTS_ONLY else self.states_away
        if needed:
            raise EngineMisuse(f"engine.{call}() while engine.offload_states() has moved {', '.join(sorted(needed))} "
                               "off the accelerator; call engine.reload_states() first")

    def check_no_gradients(self, call: str) -> None:
        """Gradients not yet applied were computed from the current weights: a call that replaces the weights
        would have the next optimizer step apply them to the new ones."""
        if self.backward_pending:
            held = "between engine.backward() and engine.step(): that backward's gradients are"
        elif self.accumulated:
            held = (f"with the gradients of {self.accumulated} micro-batch(es) accumulated toward the next optimizer "
                    "step:")
        else:
            return
        raise EngineMisuse(f"engine.{call}() {held} computed from the weights it replaces, and the next step would "
                           f"apply them to the loaded ones; call engine.zero_grad() to discard them before "
                           f"engine.{call}() (or finish the accumulation with step() first, to keep their update)")

    def fold_held_off(self) -> None:
        """A backward held off by set_gradient_accumulation_boundary(False) needs no step of its own (accelerate
        steps only at the boundary, as DeepSpeed allows): its gradients join the accumulation."""
        if self.backward_pending:
            self.backward_pending = False
            self.accumulated += 1

    def check_trains(self, call: str) -> None:
        if self.forward_only:
            raise EngineMisuse(f"engine.{call}() on an engine built without an optimizer (initialize got no "
                               "optimizer= and the config has no optimizer block): as DeepSpeed's, it only runs "
                               "forward; pass optimizer= or add an optimizer block to train it")

    def backward(self) -> None:
        self.check_alive("backward")
        self.check_trains("backward")
        if self.backward_pending:
            raise EngineMisuse("engine.backward() twice without engine.step() between: call step() after every "
                               "backward (it counts the micro-batch; the optimizer steps only at the gradient "
                               "accumulation boundary), or sum the losses and call backward once")
        self.backward_pending = True

    def step(self) -> None:
        self.check_alive("step")
        self.check_trains("step")
        if not self.backward_pending:
            raise EngineMisuse("engine.step() without engine.backward(loss) since the last step: there are no "
                               "gradients of this micro-batch to step with; call backward first")
        self.backward_pending = False
