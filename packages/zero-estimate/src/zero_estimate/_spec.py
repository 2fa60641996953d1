"""What the estimator knows about a model: counts, and where known, every module's parameter shapes.

Counts alone (`--params`) drive the stage formulas. Shapes, from a Hugging Face config or a
live module, add what counts cannot give: the params ZeRO-3 keeps whole (persistence
threshold), the linear weights autograd keeps alive, Adafactor's factored state, LoRA.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from . import _checks
from ._errors import EstimateError

Shape = tuple[int, ...]


def numel(shapes: tuple[Shape, ...]) -> int:
    return sum(math.prod(shape) for shape in shapes)


@dataclass(frozen=True)
class ModuleParams:
    """The parameters one module owns directly (DeepSpeed's "layer"), repeated `count` times.

    trainable / frozen: shapes of its own parameters, by requires_grad.
    tied:     shapes of parameters it uses but another module owns (tied embeddings):
              they count toward this layer's size, not toward the total.
    features: (in, out) when the module is a linear layer: autograd saves its weight for
              backward, and LoRA can adapt it.
    block:    inside the repeated transformer blocks, where LoRA targets are matched.
    saves_leaf_weight: the layer multiplies by its weight parameter itself (GPT-2's Conv1D, addmm),
              which autograd saves as the parameter, not as a view of a stage-3 gathered storage:
              releasing the gathered weight frees it, so it is never held.
    """

    path: str
    trainable: tuple[Shape, ...] = ()
    count: int = 1
    frozen: tuple[Shape, ...] = ()
    tied: tuple[Shape, ...] = ()
    features: tuple[int, int] | None = None
    block: bool = False
    saves_leaf_weight: bool = False

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    @property
    def own_params(self) -> int:
        return numel(self.trainable + self.frozen)

    @property
    def layer_params(self) -> int:
        return numel(self.trainable + self.frozen + self.tied)

    @property
    def weight_params(self) -> int:
        """Elements of the weight autograd keeps as a view for a linear layer's backward (0 otherwise)."""
        if self.features is None or self.saves_leaf_weight:
            return 0
        return self.features[0] * self.features[1]


@dataclass(frozen=True)
class TransformerShape:
    """The dimensions the activation formulas need.

    max_positions is set only for learned absolute positions (GPT-2, BERT), where a longer
    sequence cannot run at all.
    """

    num_layers: int
    hidden_size: int
    num_heads: int
    vocab_size: int
    max_positions: int | None = None
    # Whether attention applies dropout to its probabilities (a mask and a dropped copy per layer), and
    # whether the layer's outputs are dropped out (Korthikanti et al.'s two 1-byte masks per layer). A config
    # (--preset, --config, from_module) says, from its rates: p = 0 makes torch's dropout return its input.
    # Unknown (None, from counts) counts them, as Korthikanti et al. do.
    attention_dropout: bool | None = None
    hidden_dropout: bool | None = None
    # The MLP's structure (_activations.py): its width (None: 4h, Korthikanti et al.'s), how many tensors of that
    # width it saves for backward (None: 2, a GELU's input and output; see mlp_saved_tensors()), and whether
    # the norms take their input in fp32 (Hugging Face's RMSNorm upcasts, and saves the fp32 copy).
    intermediate_size: int | None = None
    mlp_saved_tensors: int | None = None
    norm_upcast: bool = False
    # Norms per layer: 2, or 1 where attention and the MLP read one norm's output side by side (Phi), whose
    # saved input the MLP then shares.
    norms_per_layer: int = 2
    # Key/value heads where fewer than the query heads (grouped-query attention); None: as many. A fused
    # attention kernel keeps K and V that narrow; eager attention repeats them to every query head first.
    num_kv_heads: int | None = None


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapters of rank `rank` on the linear layers named in `targets` ("all-linear": every one)."""

    rank: int
    targets: tuple[str, ...] = ("all-linear",)

    def __post_init__(self) -> None:
        _checks.count(self.rank, "lora_rank")
        if isinstance(self.targets, str) or not self.targets:
            raise EstimateError("name the linear layers to adapt (a tuple of names), or all-linear", "lora_targets")


@dataclass(frozen=True)
class ModelSpec:
    """A model as the estimator sees it. Build one with the `from_*` functions of zero_estimate.

    `modules` lists the modules in the order `model.parameters()` yields their parameters, each
    module's own shapes in registration order. Consecutive modules with the same `count` are
    one repeated block (a transformer layer): the model registers every module of the block
    once, then again, `count` times (`instances()`). The engine cuts its reduce buckets in this
    order, so the estimate can lay them out as it does.
    """

    name: str
    total_params: int
    trainable_params: int
    largest_layer_params: int | None
    modules: tuple[ModuleParams, ...] = ()
    shape: TransformerShape | None = None
    lora: LoraSpec | None = None

    @classmethod
    def from_modules(
        cls,
        name: str,
        modules: tuple[ModuleParams, ...],
        shape: TransformerShape | None = None,
        lora: LoraSpec | None = None,
    ) -> ModelSpec:
        return cls(
            name=name,
            total_params=sum(m.own_params * m.count for m in modules),
            trainable_params=sum(numel(m.trainable) * m.count for m in modules),
            largest_layer_params=max(m.layer_params for m in modules),
            modules=modules,
            shape=shape,
            lora=lora,
        )

    def instances(self) -> Iterator[ModuleParams]:
        """Every module once per repetition, in the order the model registers their parameters."""
        start = 0
        while start < len(self.modules):
            count = self.modules[start].count
            stop = start
            while stop < len(self.modules) and self.modules[stop].count == count:
                stop += 1
            block = self.modules[start:stop]
            for _ in range(count):
                yield from block
            start = stop

    def persistent_params(self, threshold: int) -> int:
        """Params ZeRO-3 keeps whole on every rank: each parameter with at most `threshold` elements.

        0 without shapes: counts alone cannot tell which params are small.
        """
        return sum(
            math.prod(shape) * m.count
            for m in self.modules
            for shape in m.trainable + m.frozen
            if math.prod(shape) <= threshold
        )

    def linear_weight_params(self, above: int = 0) -> int | None:
        """Elements of the linear-layer weights larger than `above` elements; None without shapes."""
        if not self.modules:
            return None
        return sum(m.weight_params * m.count for m in self.modules if m.weight_params > above)

    def factored_state_elements(self) -> int | None:
        """Adafactor's state for the trainable params: rows + columns per matrix, the whole of a vector.

        None without shapes, where it cannot be known.
        """
        if not self.modules:
            return None
        return sum(_factored(shape) * m.count for m in self.modules for shape in m.trainable)


def _factored(shape: Shape) -> int:
    # Adafactor keeps row and column second moments for a matrix (batched over leading
    # dims), and the full second moment for a vector or scalar.
    if len(shape) < 2:
        return math.prod(shape)
    return math.prod(shape[:-2]) * (shape[-2] + shape[-1])
