"""How many fp32 tensors of a parameter's size an optimizer keeps: the optimizer state's share of the plan."""
from __future__ import annotations

from collections.abc import Mapping


def optimizer_state_tensors(name: str | None, params: Mapping[str, object]) -> int:
    """The fp32 state tensors of one parameter's size the optimizer keeps, as zero-offload's CPU optimizers and
    torch's allocate them: Adam/AdamW 2 (3 with amsgrad), Lion 1 (exp_avg), Adagrad 1 (sum), SGD 1 with momentum
    (momentum_buffer), else 0. Another optimizer, or a client's, is sized as Adam."""
    kind = (name or "adam").lower()
    if kind in ("lion", "adagrad"):
        return 1
    if kind == "sgd":
        return 1 if params.get("momentum", 0) else 0
    if kind in ("adam", "adamw") and params.get("amsgrad"):
        return 3
    return 2
