"""`zero report` lists the swap-I/O backends, added by zero-offload through `zero_register_report_sections`."""
from __future__ import annotations

import json

import pytest

import zero_offload
from cli_helpers import run_main, run_zero

pytest.importorskip("zero_cli")

THREADS_REASON = "O_DIRECT pwrite/preadv from a thread pool (built in, nothing to compile)"


@pytest.fixture(autouse=True)
def default_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZERO_SWAP_BACKEND", raising=False)


def test_json_report_lists_the_backends_with_threads_selected() -> None:
    result = run_zero("report", "--json")  # a fresh interpreter: the plugin comes from its entry point
    assert result.returncode == 0, result.stderr
    section = json.loads(result.stdout)["swap_backends"]
    rows = {row["name"]: row for row in section["backends"]}
    assert section["selected"] == "threads" and set(rows) == {"threads", "io_uring"}
    assert rows["threads"] == {"name": "threads", "available": True, "selected": True,
                               "distribution": "zero-offload", "reason": THREADS_REASON}
    assert rows["io_uring"]["selected"] is False and rows["io_uring"]["distribution"] == "zero-offload"
    assert rows["io_uring"]["reason"]  # why it is (or is not) available here


def test_the_variable_selects_io_uring(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ZERO_SWAP_BACKEND", "io_uring")
    code, out, err = run_main(capsys, "report", "--json")
    assert code == 0, err
    section = json.loads(out)["swap_backends"]
    assert section["selected"] == "io_uring"
    assert {row["name"]: row["selected"] for row in section["backends"]} == {"io_uring": True, "threads": False}


def test_text_report_shows_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, "report")
    assert code == 0, err
    section = out.split("\n\nswap backends (ZERO_SWAP_BACKEND, default threads)\n\n", 1)[1].split("\n\n", 1)[0]
    header, _, *rows = section.splitlines()
    assert header.split() == ["name", "available", "selected", "reason", "distribution"]
    threads = next(row for row in rows if row.startswith("threads "))
    assert [cell.strip() for cell in threads.split("  ") if cell.strip()] == [
        "threads", "yes", "*", THREADS_REASON, "zero-offload"]


def test_an_unknown_backend_is_one_line_in_the_section(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ZERO_SWAP_BACKEND", "io-uring")
    code, out, err = run_main(capsys, "report", "--json")
    assert code == 0, err  # the rest of the report is still printed
    assert json.loads(out)["swap_backends"]["error"] == (
        f"plugin 'offload' from zero-offload {zero_offload.__version__} could not build this section: "
        "PluginError(\"unknown swap backend 'io-uring' (from ZERO_SWAP_BACKEND), did you mean 'io_uring'?; "
        "available: io_uring (zero-offload), threads (zero-offload)\")")
