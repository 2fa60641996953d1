"""The native op's build: cached per session, reused by other processes, and loud when impossible."""
from __future__ import annotations

import os
from pathlib import Path

import zero_pin
from zero_pin._native_build import SOURCE

# Selecting native must raise (twice: no silent fallback); the status calls after it must not.
ERRORS_THEN_STATE = r"""
import json, torch, zero_pin
errors = []
for select in (lambda: zero_pin.get_backend("native"), lambda: zero_pin.pin_memory(torch.ones(2))):
    try:
        select()
    except zero_pin.NativeBuildError as error:
        errors.append(str(error))
print(json.dumps({"errors": errors, "state": zero_pin.native_build_state(), "statuses": zero_pin.backend_statuses()}))
"""


def test_the_op_is_built_into_torch_extensions_dir(native, torch_extensions_dir):
    state = zero_pin.native_build_state()
    library = Path(state["detail"])
    assert state["state"] == "built" and library.is_file()
    assert library.parent.parent == torch_extensions_dir
    assert library.name.startswith("zero_pin_native_")  # plus a hash of source, flags, torch, Python
    assert zero_pin.available_backends()["native"].available() == (True, f"op built: {library}")


def test_another_process_reuses_the_build(native, run_python):
    library = Path(zero_pin.native_build_state()["detail"])
    built_at = library.stat().st_mtime_ns
    out = run_python(
        "import json, torch, zero_pin; before = zero_pin.native_build_state()['state'];"
        "p = zero_pin.get_backend('native').pin_memory(torch.ones(3));"
        "print(json.dumps([before, zero_pin.native_build_state()['detail']]))"
    ).data
    assert out == ["built", str(library)]
    assert library.stat().st_mtime_ns == built_at  # loaded as it was, not rebuilt


def test_without_compiler_or_ninja_selecting_native_fails_at_once(run_python, tmp_path):
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    env = {"PATH": str(empty_bin), "CXX": "c++", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"),
           "DS_PIN_MEMORY_BACKEND": "native"}
    # Blocking the import stands for an environment without the ninja package (its binary is not on PATH either).
    out = run_python("import sys; sys.modules['ninja'] = None\n" + ERRORS_THEN_STATE, env=env).data
    assert out["state"]["state"] == "cannot build"
    assert "a C++ compiler" in out["state"]["detail"] and "ninja (pip install ninja)" in out["state"]["detail"]
    statuses = {row["name"]: row for row in out["statuses"]}  # reported, not raised
    assert statuses["native"]["available"] is False and statuses["native"]["selected"]
    assert statuses["torch"]["available"] is True
    assert len(out["errors"]) == 2
    for message in out["errors"]:
        assert "\n" not in message
        assert "missing a C++ compiler" in message and "ninja" in message
        assert message.endswith("or select DS_PIN_MEMORY_BACKEND=torch")


def test_the_pip_ninja_is_found_without_an_activated_environment(run_python, tmp_path):
    env = {"PATH": str(tmp_path), "CXX": "c++", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    detail = run_python("import json, zero_pin; print(json.dumps(zero_pin.native_build_state()['detail']))", env=env).data
    assert "C++ compiler" in detail and "ninja" not in detail


def test_a_failing_compiler_is_reported_with_where_to_look(run_python, tmp_path):
    env = {"CXX": "/bin/false", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "DS_PIN_MEMORY_BACKEND": "native"}
    out = run_python(ERRORS_THEN_STATE, env=env).data
    assert len(out["errors"]) == 2
    assert all("failed to build in" in e and "zero pin build --verbose" in e for e in out["errors"])
    assert out["state"]["state"] == "cannot build" and "/bin/false" in out["state"]["detail"]
    native_row = next(row for row in out["statuses"] if row["name"] == "native")
    assert native_row["available"] is False


def test_the_source_ships_inside_the_package():
    assert SOURCE.is_file() and SOURCE.parent.parent == Path(zero_pin.__file__).parent
    assert os.access(SOURCE, os.R_OK)


def test_a_build_directory_that_is_a_link_is_refused_and_its_target_untouched(run_python, tmp_path):
    # torch writes build.ninja and the library into the build directory: through a link they would land elsewhere.
    outside = tmp_path / "outside"
    outside.mkdir()
    code = (
        "import json, os, zero_pin\nfrom zero_pin._native_build import LOCKED_BLOCK_OP as op\n"
        f"os.makedirs(os.environ['TORCH_EXTENSIONS_DIR']); os.symlink({str(outside)!r}, op.build_directory())\n"
        "try:\n    op.load()\nexcept zero_pin.NativeBuildError as error:\n"
        "    print(json.dumps([str(error), str(op.build_directory())]))\n"
    )
    message, directory = run_python(code, {"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}).data
    assert message == (f"the native pin op's build directory {directory} is a symbolic link (to {outside}); remove "
                       "the link (the op is rebuilt there), or set TORCH_EXTENSIONS_DIR to another directory")
    assert os.listdir(outside) == []
