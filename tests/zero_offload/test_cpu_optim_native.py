"""The CPU optimizers' fused op: its build and state, the loud fallback to torch's kernels, the
choice by ZERO_CPU_OPTIMIZER_KERNEL, and what the op promises beyond torch's kernels (the same
bits for any thread count and any cut into sub-groups)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from zero_offload import CPUAdagrad, CPUAdam, CPULion
from zero_offload.optim import KERNEL_ENV, build_cpu_optimizer_op, cpu_optimizer_op_state
from optim_helpers import make_params, set_grads

OPTIMIZERS = {"adam": CPUAdam, "adagrad": CPUAdagrad, "lion": CPULion}

# Two optimizers, two steps each: the fallback must warn once, and both must still step.
STEP_TWICE = r"""
import json, warnings, torch, zero_offload
from zero_offload.optim import cpu_optimizer_op_state
warnings.simplefilter("always")
params = [torch.ones(4), torch.ones(4)]
with warnings.catch_warnings(record=True) as caught:
    for cls, param in zip((zero_offload.CPUAdam, zero_offload.CPULion), params):
        optimizer = cls([param], lr=0.1)
        for _ in range(2):
            param.grad = torch.ones(4)
            optimizer.step()
print(json.dumps({"warnings": [str(w.message) for w in caught if w.category is RuntimeWarning],
                  "stepped": [p.tolist() != [1.0] * 4 for p in params], "state": cpu_optimizer_op_state()}))
"""


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(autouse=True)
def default_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KERNEL_ENV, raising=False)


def test_the_op_is_built_into_torch_extensions_dir():
    library = Path(build_cpu_optimizer_op().__file__)
    state = cpu_optimizer_op_state()
    assert state == {"state": "built", "detail": str(library)}
    assert library.is_file() and library.name.startswith("zero_offload_cpu_optim_")  # plus a hash


def test_the_source_ships_inside_the_package():
    import zero_offload

    csrc = Path(zero_offload.__file__).parent / "csrc"
    assert (csrc / "cpu_optim.cpp").is_file() and (csrc / "cpu_optim_lanes.h").is_file()


def test_a_failed_build_warns_once_and_steps_on_torchs_kernels(tmp_path):
    out = run_python(STEP_TWICE, {"CXX": "/bin/false", "TORCH_EXTENSIONS_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["stepped"] == [True, True]
    (message,) = result["warnings"]
    assert "step with torch's kernels" in message and "failed to build" in message
    assert "build_cpu_optimizer_op(verbose=True)" in message and f"{KERNEL_ENV}=torch" in message
    assert result["state"]["state"] == "cannot build" and "/bin/false" in result["state"]["detail"]


def test_missing_tools_are_named_in_the_warning(tmp_path):
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    code = "import sys; sys.modules['ninja'] = None\n" + STEP_TWICE  # as if the ninja package were missing
    out = run_python(code, {"PATH": str(empty_bin), "CXX": "c++", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")})
    assert out.returncode == 0, out.stderr
    (message,) = json.loads(out.stdout.splitlines()[-1])["warnings"]
    assert "missing a C++ compiler" in message and "ninja (pip install ninja)" in message


def test_native_makes_a_failed_build_an_error(tmp_path):
    out = run_python(STEP_TWICE, {"CXX": "/bin/false", "TORCH_EXTENSIONS_DIR": str(tmp_path), KERNEL_ENV: "native"})
    assert out.returncode != 0
    assert "NativeBuildError" in out.stderr and "failed to build" in out.stderr


def test_torch_chooses_torchs_kernels_without_building_or_warning(tmp_path):
    out = run_python(STEP_TWICE, {"CXX": "/bin/false", "TORCH_EXTENSIONS_DIR": str(tmp_path), KERNEL_ENV: "torch"})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["warnings"] == [] and result["stepped"] == [True, True]
    assert result["state"]["state"] == "off" and f"{KERNEL_ENV}=torch" in result["state"]["detail"]
    assert not any(tmp_path.iterdir())  # nothing was built


def test_an_unknown_kernel_choice_is_an_error(monkeypatch):
    monkeypatch.setenv(KERNEL_ENV, "fast")
    param = torch.ones(3)
    param.grad = torch.ones(3)
    with pytest.raises(ValueError, match=f"{KERNEL_ENV}='fast' is not a kernel choice: use native or torch"):
        CPUAdam([param]).step()


@pytest.mark.parametrize("family", sorted(OPTIMIZERS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_same_bits_on_one_and_two_threads(family, dtype):
    shapes = [(3 * (1 << 16) + 5,), (1 << 17,), (37,)]  # more chunks than threads, a ragged end
    runs = []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            params = make_params(shapes, dtype)
            optimizer = OPTIMIZERS[family](params, weight_decay=0.1)
            for step in range(3):
                set_grads([params], seed=step)
                optimizer.step()
            runs.append(params)
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_fp64_params_step_on_torchs_kernel():
    ours, theirs = make_params(dtype=torch.float64), make_params(dtype=torch.float64)
    hyper = dict(lr=1e-2, weight_decay=0.1)
    optimizers = [CPUAdam(ours, **hyper), torch.optim.AdamW(theirs, **hyper, fused=True)]
    for step in range(3):
        set_grads([ours, theirs], seed=step)
        for optimizer in optimizers:
            optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


def test_a_state_that_does_not_fit_its_param_is_refused_not_stepped():
    param = torch.ones(1000)
    param.grad = torch.ones(1000)
    optimizer = CPUAdam([param])
    optimizer.step()
    optimizer.state[param]["exp_avg"] = torch.zeros(10)  # the op would write past its end
    with pytest.raises(ValueError, match=r"a state tensor of \[10\] does not fit its param of 1000 elements"):
        optimizer.step()


def test_the_build_is_keyed_by_the_source_its_headers_and_the_cpu(tmp_path, monkeypatch):
    from zero_pin._native_build import NativeOp

    (tmp_path / "op.cpp").write_text('#include "op.h"\n')
    (tmp_path / "op.h").write_text("// one\n")
    op = NativeOp("op.cpp", "op_", "an op", fallback="", hint="", csrc=tmp_path, headers=("op.h",), cpu_specific=True)
    names = [op.extension_name()]
    (tmp_path / "op.h").write_text("// two\n")
    names.append(op.extension_name())
    monkeypatch.setattr("zero_pin._native_build.cpu_fingerprint", lambda: "another CPU")
    names.append(op.extension_name())
    assert len(set(names)) == 3 and all(name.startswith("op_") for name in names)


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
def test_a_tensor_without_data_is_refused_not_read():
    """A fake tensor (as a dry run's) has a null data pointer: the op would crash on it."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from zero_offload.optim._lists import StepLists
    from zero_offload.optim._native import native_arguments

    with FakeTensorMode():
        param, grad, state = torch.zeros(4), torch.zeros(4), torch.zeros(4)
    lists = StepLists([[state]], [param], [grad], [torch.tensor(1.0)])
    with pytest.raises(ValueError, match="a param tensor has no data"):
        native_arguments(lists)
