"""`zero pin build` and `zero pin check`, run through the `zero` command."""
from __future__ import annotations

import json

import pytest

from cli_helpers import run_main
from zero_pin._native_build import COUNTING_ALLOCATOR_OP

zero_cli = pytest.importorskip("zero_cli")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    return run_main(capsys, "pin", *argv)


def test_build_reports_the_cached_library(capsys, native):
    code, out, _ = run(capsys, "build", "--json")
    data = json.loads(out)
    assert code == 0 and data["state"] == "built" and data["detail"].endswith(".so")
    counter = data["counting_allocator_op"]  # `zero pin build` builds the CPU allocator count too
    assert counter["state"] == "built" and "zero_pin_counting_allocator_" in counter["detail"]
    assert counter["detail"].endswith(".so")


def test_check_reports_backends_memlock_limit_and_the_op(capsys, native):
    counter = COUNTING_ALLOCATOR_OP.load()  # built (loading does not start the count)
    code, out, _ = run(capsys, "check")
    assert code == 0
    assert "native" in out and "torch *" in out and "zero-pin" in out
    assert "memlock limit (ulimit -l): soft " in out and "native op: built (" in out
    assert f"CPU allocator count op: built ({counter.__file__})" in out

    code, out, _ = run(capsys, "check", "--json")
    data = json.loads(out)
    assert data["selected"] == "torch" and data["native_op"]["state"] == "built"
    assert data["counting_allocator_op"]["state"] == "built"
    assert set(data["memlock_limit"]) == {"soft", "hard"}
    assert {row["name"] for row in data["backends"]} >= {"torch", "native"}


def test_check_rejects_an_unknown_backend_in_one_line(capsys, monkeypatch):
    monkeypatch.setenv("DS_PIN_MEMORY_BACKEND", "bogus")
    code, out, err = run(capsys, "check")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "native (zero-pin), torch (zero-pin)" in err


def test_an_unknown_action_is_rejected(capsys):
    with pytest.raises(SystemExit) as exit_:
        zero_cli.main(["pin", "clean"])
    assert exit_.value.code == 2 and "invalid choice: 'clean'" in capsys.readouterr().err
