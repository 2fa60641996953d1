"""zero-estimate reads a ds_config's "auto" as zero-core does: a default only on the keys the Hugging Face Trainer fills.

Layering keeps the two readers apart (zero-estimate may not import zero-core), so this test keeps their lists in step.
"""
from __future__ import annotations

from zero_plugins.ds_config import ZeroConfig
from zero_estimate._ds_config import TRAINER_FILLED


def _engine_trainer_filled() -> set[str]:
    """Every spelling, as a dotted key, of the fields zero-core's config blocks mark TRAINER_FILLS."""
    blocks = {"": ZeroConfig, "fp16": ZeroConfig.model_fields["fp16"].annotation,
              "bf16": ZeroConfig.model_fields["bf16"].annotation,
              "zero_optimization": ZeroConfig.model_fields["zero_optimization"].annotation}
    dotted = set()
    for prefix, block in blocks.items():
        for spelling, field in block.key_names().items():  # type: ignore[union-attr]
            if field in block.TRAINER_FILLS:  # type: ignore[union-attr]
                for path in ([prefix, "bfloat16"] if prefix == "bf16" else [prefix]):
                    dotted.add(f"{path}.{spelling}" if path else spelling)
    return dotted


def test_the_estimator_reads_auto_where_the_engine_does() -> None:
    assert TRAINER_FILLED == _engine_trainer_filled()
