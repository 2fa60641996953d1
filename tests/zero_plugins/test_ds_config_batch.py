"""train_batch_size = micro batch * accumulation steps * world size, filled and checked as DeepSpeed does."""
from __future__ import annotations

import pytest
from zero_plugins.ds_config import ConfigError, load_config

KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


@pytest.mark.parametrize(
    "given, world_size, expected",
    [
        ((32, 4, 2), 4, (32, 4, 2)),  # all three given and consistent
        ((32, 4, None), 4, (32, 4, 2)),  # accumulation computed
        ((32, None, 2), 4, (32, 4, 2)),  # micro batch computed
        ((None, 4, 2), 4, (32, 4, 2)),  # global batch computed
        ((32, None, None), 4, (32, 8, 1)),  # accumulation 1, micro batch computed
        ((None, 4, None), 4, (16, 4, 1)),  # accumulation 1, global batch computed
        ((8, 8, None), 1, (8, 8, 1)),
    ],
)
def test_missing_batch_settings_are_filled(given, world_size, expected):
    raw = {key: value for key, value in zip(KEYS, given) if value is not None}
    config = load_config(raw, world_size=world_size)
    assert tuple(getattr(config, key) for key in KEYS) == expected


@pytest.mark.parametrize(
    "given, world_size, shown",
    [
        ((16, 2, 2), 2, "(2 * 2 * 2 = 8, got 16)"),
        ((8, 4, None), 4, "(4 * 0 * 4 = 0, got 8)"),  # 8 // 4 // 4 leaves no accumulation step
        ((10, 4, None), 1, "(4 * 2 * 1 = 8, got 10)"),  # not divisible
        ((6, None, 4), 2, "(0 * 4 * 2 = 0, got 6)"),
    ],
)
def test_inconsistent_batch_settings_are_one_line_errors(given, world_size, shown):
    raw = {key: value for key, value in zip(KEYS, given) if value is not None}
    with pytest.raises(ConfigError) as info:
        load_config(raw, world_size=world_size)
    assert info.value.path == "train_batch_size"
    assert shown in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("raw", [{}, {"gradient_accumulation_steps": 2}])
def test_a_batch_size_is_required_with_world_size(raw):
    with pytest.raises(ConfigError, match="^train_batch_size: set train_batch_size or train_micro_batch_size_per_gpu"):
        load_config(raw, world_size=2)


def test_without_world_size_batch_settings_are_left_as_given():
    config = load_config({"train_batch_size": 7, "train_micro_batch_size_per_gpu": 2})
    assert tuple(getattr(config, key) for key in KEYS) == (7, 2, None)


def test_world_size_must_be_positive():
    with pytest.raises(ValueError, match="world_size"):
        load_config({"train_batch_size": 8}, world_size=0)
