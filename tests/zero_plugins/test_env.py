"""Flags and integers from environment variables: the documented spellings, and one error naming the variable
and the form for anything else (zero_plugins.env_flag, env_int)."""
from __future__ import annotations

import pytest
from zero_plugins import EnvVarError, ZeroError, env_flag, env_int

VAR = "ZERO_TEST_ENV_VALUE"


@pytest.mark.parametrize(("raw", "value"), [
    ("1", True), ("true", True), ("TRUE", True), ("Yes", True), (" on ", True),
    ("0", False), ("false", False), ("No", False), ("OFF", False), ("\t0\n", False),
])
def test_flags_take_the_documented_spellings_in_any_case(monkeypatch: pytest.MonkeyPatch, raw: str,
                                                         value: bool) -> None:
    monkeypatch.setenv(VAR, raw)
    assert env_flag(VAR, default=not value) is value


@pytest.mark.parametrize("raw", [None, "", "   "])
@pytest.mark.parametrize("default", [True, False])
def test_an_unset_or_blank_flag_is_the_default(monkeypatch: pytest.MonkeyPatch, raw: str | None,
                                               default: bool) -> None:
    monkeypatch.delenv(VAR, raising=False)
    if raw is not None:
        monkeypatch.setenv(VAR, raw)
    assert env_flag(VAR, default) is default


@pytest.mark.parametrize("raw", ["2", "y", "n", "enabled", "t", "-1", "truee", "1.0", "ja"])
def test_other_flag_spellings_are_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(EnvVarError) as caught:
        env_flag(VAR, default=False)
    assert str(caught.value) == (f"{VAR}={raw!r} is not a flag: set it to 1, true, yes or on (or 0, false, no, off; "
                                 "any case), or unset it for the default (off)")
    assert isinstance(caught.value, ZeroError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize(("raw", "value"), [("0", 0), ("7", 7), (" 12 ", 12), ("+3", 3), ("0010", 10)])
def test_integers_within_bounds_are_read(monkeypatch: pytest.MonkeyPatch, raw: str, value: int) -> None:
    monkeypatch.setenv(VAR, raw)
    assert env_int(VAR, 5, minimum=0) == value


def test_an_unset_or_blank_integer_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VAR, raising=False)
    assert env_int(VAR, 5, minimum=1) == 5
    monkeypatch.setenv(VAR, " ")
    assert env_int(VAR, 5, minimum=1) == 5


@pytest.mark.parametrize(("raw", "minimum"), [
    ("abc", 0), ("1.5", 0), ("1e3", 0), ("1_000", 0), ("٣", 0), ("0x10", 0), ("-1", 0), ("0", 1), ("- 1", 0),
])
def test_other_integers_are_refused_naming_the_variable_and_the_form(monkeypatch: pytest.MonkeyPatch, raw: str,
                                                                     minimum: int) -> None:
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(EnvVarError) as caught:
        env_int(VAR, 4, minimum=minimum)
    assert str(caught.value) == (f"{VAR}={raw!r} is not a whole number >= {minimum}: set it to one (e.g. 1), or unset "
                                 "it for the default (4)")
