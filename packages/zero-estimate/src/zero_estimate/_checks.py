"""Validation shared by every entry point, so the API and the CLI reject the same inputs."""
from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from typing import NoReturn

from ._errors import EstimateError

# Upper bounds: a value above one is a typo (a missing unit, an extra e3), not a model or a cluster.
# The API and the CLI check them through count() and positive_number(); docs/estimate.md lists them.
MAX_PARAMS = 10**15  # parameters: ~1000x the largest models trained
MAX_GPUS = 10**6  # GPUs per node, nodes, and the two multiplied (the world size)
MAX_BATCH = 10**6  # samples per micro-batch, accumulation steps
MAX_SEQ_LEN = 2**24  # tokens per sample (16,777,216): above every model's context window
MAX_BYTES = 2**50  # memory and NVMe sizes: 1 PiB
MAX_LAYERS = 10**4  # transformer layers: ~80x the deepest trained model (126); also keeps the per-layer work fast
MAX_WIDTH = 2**20  # hidden size, MLP width, head size, heads (1,048,576): ~14x the widest MLP (PaLM's 73,728)
MAX_VOCAB = 2**24  # vocabulary (16,777,216): ~64x the largest (256,000)
MAX_COUNT = 10**15  # any other count (bucket sizes, LoRA rank, ...)

# API argument name -> (bound, what it counts).
LIMITS: dict[str, tuple[int, str]] = {
    **dict.fromkeys(("total_params", "trainable_params", "largest_layer_params"), (MAX_PARAMS, "1e15 parameters")),
    **dict.fromkeys(("gpus_per_node", "num_gpus_per_node"), (MAX_GPUS, "1e6 GPUs per node")),
    **dict.fromkeys(("nodes", "num_nodes"), (MAX_GPUS, "1e6 nodes")),
    "world_size": (MAX_GPUS, "1e6 GPUs in all"),
    "micro_batch": (MAX_BATCH, "1e6 samples per GPU"),
    "grad_accum": (MAX_BATCH, "1e6 accumulation steps"),
    "seq_len": (MAX_SEQ_LEN, "2**24 = 16777216 tokens per sample"),
    **dict.fromkeys(("gpu_memory", "cpu_memory", "nvme"), (MAX_BYTES, "1 PiB (1024 TiB)")),
    # A model's shape: the --layers/--hidden-size/--heads/--vocab-size flags and a config.json's keys alike.
    "num_layers": (MAX_LAYERS, "1e4 layers"),
    "hidden_size": (MAX_WIDTH, "2**20 = 1048576"),
    "num_heads": (MAX_WIDTH, "2**20 = 1048576 heads"),
    "vocab_size": (MAX_VOCAB, "2**24 = 16777216 tokens"),
    "max_positions": (MAX_SEQ_LEN, "2**24 = 16777216 positions"),
}


def at_most(value: int | float, field: str) -> None:
    """The upper bound of `field` (LIMITS, else MAX_COUNT), named in the error."""
    bound, what = LIMITS.get(field, (MAX_COUNT, "1e15"))
    if value > bound:
        raise EstimateError(f"must be at most {what} (got {_plain(value)}); check the number and its unit", field)


def world_size(gpus_per_node: int, nodes: int, field: str = "nodes") -> int:
    """GPUs per node times nodes, within MAX_GPUS."""
    total = gpus_per_node * nodes
    if total > MAX_GPUS:
        raise EstimateError(
            f"{gpus_per_node} GPUs per node x {nodes} nodes = {total} GPUs; the most is 1e6 GPUs in all", field
        )
    return total


def multiple_of(whole: tuple[str, int], part: tuple[str, int]) -> None:
    """Attention splits `whole` (the hidden size, or the query heads) evenly among `part` (heads, key/value heads)."""
    (whole_name, whole_value), (part_name, part_value) = whole, part
    if whole_value % part_value:
        raise EstimateError(f"{whole_name} ({whole_value}) must be a multiple of {part_name} ({part_value})")


def lora_rank(rank: int, hidden_size: int, field: str = "lora_rank") -> None:
    """A LoRA rank above the model's hidden size is larger than the layers it adapts."""
    if rank > hidden_size:
        raise EstimateError(f"must be at most the model's hidden size {hidden_size} (got {rank})", field)


def count(value: object, field: str, *, minimum: int = 1) -> int:
    """A whole number of things (params, GPUs, elements) at least `minimum`.

    Floats are accepted when they are whole (2851e6), because DeepSpeed's examples pass them.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EstimateError(f"must be a number (got {value!r})", field)
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise EstimateError(f"must be a whole number (got {value!r})", field)
    if value < minimum:
        raise EstimateError(f"must be at least {minimum} (got {_plain(value)})", field)
    at_most(value, field)
    return int(value)


def positive_number(value: object, field: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise EstimateError(f"must be a finite number (got {value!r})", field)
    if value < 0 or (value == 0 and not allow_zero):
        bound = "0 or more" if allow_zero else "greater than 0"
        raise EstimateError(f"must be {bound} (got {_plain(value)})", field)
    if field in LIMITS:
        at_most(value, field)
    return value


def choice(value: object, field: str, choices: Iterable[str]) -> str:
    options = list(choices)
    if value not in options:
        unknown(value, field, options)
    return str(value)


def unknown(
    value: object, field: str, options: Iterable[str], *, what: str = "value", otherwise: str = ""
) -> NoReturn:
    """Raise "unknown value 'x'; did you mean 'y'? choose from: a, b", plus an `otherwise` hint."""
    names = list(options)
    hint = difflib.get_close_matches(str(value), names, n=1)
    did_you_mean = f"; did you mean {hint[0]!r}?" if hint else ";"
    tail = f"; {otherwise}" if otherwise else ""
    raise EstimateError(f"unknown {what} {value!r}{did_you_mean} choose from: {', '.join(names)}{tail}", field)


def _plain(value: int | float) -> str:
    if isinstance(value, float) and not (value.is_integer() and abs(value) < 1e30):
        return f"{value:.6g}"
    whole = int(value)
    # Python will not print an int of more than 4300 digits; nobody wants to read 30.
    return str(whole) if abs(whole) < 10**30 else f"about 2**{whole.bit_length()}"
