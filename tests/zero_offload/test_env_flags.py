"""zero_plugins.env_flag where zero-offload and zero-pin read their on/off variables (ZERO_SWAP_BUFFERED,
ZERO_PIN_HUGE_PAGES); its spellings themselves are test_env.py's."""
from __future__ import annotations

import pytest
from zero_plugins import EnvVarError

def test_zero_swap_buffered_disabled_is_refused_not_read_as_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from zero_offload.swap import buffered_from_env

    monkeypatch.setenv("ZERO_SWAP_BUFFERED", "disabled")
    with pytest.raises(EnvVarError, match="ZERO_SWAP_BUFFERED='disabled' is not a flag"):
        buffered_from_env()
    monkeypatch.setenv("ZERO_SWAP_BUFFERED", "off")
    assert buffered_from_env() is False


def test_zero_pin_huge_pages_reads_the_same_spellings(monkeypatch: pytest.MonkeyPatch) -> None:
    from zero_pin._hugepages import huge_page_policy

    monkeypatch.setenv("ZERO_PIN_HUGE_PAGES", "no")
    assert huge_page_policy()["used"] is False
    monkeypatch.setenv("ZERO_PIN_HUGE_PAGES", "maybe")
    with pytest.raises(EnvVarError, match="ZERO_PIN_HUGE_PAGES='maybe' is not a flag"):
        huge_page_policy()
