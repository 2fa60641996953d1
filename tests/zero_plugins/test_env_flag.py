"""zero_plugins.env_flag: the one reader of on/off environment variables (ZERO_SWAP_BUFFERED, ZERO_PIN_HUGE_PAGES)."""
from __future__ import annotations

import pytest
from zero_plugins import FALSE_SPELLINGS, TRUE_SPELLINGS, EnvVarError, ZeroError, env_flag

NAME = "ZERO_TEST_FLAG"


@pytest.mark.parametrize("value", [*TRUE_SPELLINGS, "TRUE", "Yes", " on "])
def test_on_spellings_read_as_true(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(NAME, value)
    assert env_flag(NAME, False) is True


@pytest.mark.parametrize("value", [*FALSE_SPELLINGS, "FALSE", "No", " off "])
def test_off_spellings_read_as_false(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(NAME, value)
    assert env_flag(NAME, True) is False


@pytest.mark.parametrize(("value", "default"), [(None, True), (None, False), ("", True), ("  ", False)])
def test_unset_or_blank_takes_the_default(monkeypatch: pytest.MonkeyPatch, value: str | None, default: bool) -> None:
    if value is None:
        monkeypatch.delenv(NAME, raising=False)
    else:
        monkeypatch.setenv(NAME, value)
    assert env_flag(NAME, default) is default


@pytest.mark.parametrize("value", ["disabled", "enabled", "2", "-1", "y", "n", "truee", "on off"])
def test_other_values_are_refused_naming_the_variable_and_the_spellings(monkeypatch: pytest.MonkeyPatch,
                                                                         value: str) -> None:
    monkeypatch.setenv(NAME, value)
    with pytest.raises(EnvVarError) as caught:
        env_flag(NAME, False)
    assert isinstance(caught.value, ZeroError)
    assert str(caught.value) == (
        f"{NAME}={value!r} is not an on/off value: use one of 1/true/yes/on to turn it on or 0/false/no/off to "
        f"turn it off (any case), or unset {NAME} for the default (off)")


def test_zero_swap_buffered_disabled_is_refused_not_read_as_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from zero_offload.swap import buffered_from_env

    monkeypatch.setenv("ZERO_SWAP_BUFFERED", "disabled")
    with pytest.raises(EnvVarError, match="ZERO_SWAP_BUFFERED='disabled' is not an on/off value"):
        buffered_from_env()
    monkeypatch.setenv("ZERO_SWAP_BUFFERED", "off")
    assert buffered_from_env() is False


def test_zero_pin_huge_pages_reads_the_same_spellings(monkeypatch: pytest.MonkeyPatch) -> None:
    from zero_pin._hugepages import huge_page_policy

    monkeypatch.setenv("ZERO_PIN_HUGE_PAGES", "no")
    assert huge_page_policy()["used"] is False
    monkeypatch.setenv("ZERO_PIN_HUGE_PAGES", "maybe")
    with pytest.raises(EnvVarError, match="ZERO_PIN_HUGE_PAGES='maybe' is not an on/off value"):
        huge_page_policy()
