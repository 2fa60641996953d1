"""`zero launch` (docs/integrations.md, "zero launch"): a program written for DeepSpeed runs unchanged.

- `zero launch --nproc_per_node 2 program.py` trains a program that says `import deepspeed` to exactly the losses
  of the same loop under `import zero_core as deepspeed` on tests/multirank.py's ranks; the program gets
  DeepSpeed's `--local_rank=<n>`, and importlib.metadata a `deepspeed` 0.19.8+zero.<v>.
- Only the processes it starts see the alias (and the processes they start, without --local_rank); plain
  `python` sees the installed DeepSpeed or none; a sitecustomize the launcher's hides still runs.
- `python -m zero_core.launch` is the same command; a failed rank's exit status is the launcher's.
- Two agents on localhost (`--nnodes 2`, c10d rendezvous) train to the losses of one node with 2 processes.
- `zero_core.launch.as_deepspeed()` aliases one process, once, and refuses one that imported DeepSpeed already.
- An installed DeepSpeed is set aside, said once on stderr.
"""
from __future__ import annotations

import importlib.util
import json
import os
import runpy
import subprocess
import sys
from importlib.machinery import PathFinder
from importlib.metadata import DistributionFinder
from pathlib import Path
from typing import Any

import pytest

import zero_core
from cli_helpers import run_zero
from multirank import free_port, run_ranks
from zero_core.launch._alias import DeepSpeedAlias, target_name
from zero_core.launch._command import SITE_FOLDER
from zero_core.launch._distribution import ZeroAsDeepSpeed

pytestmark = pytest.mark.timeout(120)

ALIAS_VERSION = f"0.19.8+zero.{zero_core.__version__}"
REAL_DEEPSPEED = PathFinder.find_spec("deepspeed") is not None  # this process has no alias: sys.path decides

# A DeepSpeed training script as its users write it; `train(deepspeed, local_rank)` is also called with zero_core
# as `deepspeed` on multirank's ranks, so both runs train the very same loop.
PROGRAM = '''
import argparse, importlib.metadata, json, sys
import torch

def train(deepspeed, local_rank):
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    config = {"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "Adam", "params": {"lr": 0.01}},
              "zero_optimization": {"stage": 2}}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    generator = torch.Generator().manual_seed(100 + engine.global_rank)
    losses = []
    for _ in range(3):
        x, y = torch.randn(4, 8, generator=generator), torch.randn(4, 4, generator=generator)
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return {"rank": engine.global_rank, "local_rank": local_rank, "losses": losses}

if __name__ == "__main__":
    import deepspeed
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    result = train(deepspeed, args.local_rank)
    result.update(version=importlib.metadata.version("deepspeed"), module=deepspeed.__name__, argv=sys.argv[1:])
    sys.stdout.write(f"losses {result['losses']} deepspeed {result['version']}\\n")  # one write: ranks share stdout
    with open(f"{args.out}/rank{result['rank']}.json", "w") as out:
        json.dump(result, out)
'''

# What a launched process (and a process it starts) sees of deepspeed, as one JSON line.
PROBE = '''
import importlib.metadata, importlib.util, json, os, subprocess, sys

def seen():
    spec = importlib.util.find_spec("deepspeed")
    try:
        version = importlib.metadata.version("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"argv": sys.argv[1:], "origin": spec and spec.origin, "version": version,
            "user_sitecustomize": os.environ.get("USER_SITECUSTOMIZE_RAN")}

if __name__ == "__main__":
    result = seen()
    if "--child" not in sys.argv:
        import deepspeed, deepspeed.zero, zero_core
        result["same_objects"] = deepspeed is zero_core and deepspeed.zero is zero_core.zero
        try:
            import deepspeed.nosuch
        except ModuleNotFoundError as error:
            result["missing"] = [str(error), error.name]
        from accelerate.utils import is_deepspeed_available
        result["accelerate_sees_deepspeed"] = is_deepspeed_available()
        child = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, check=True)
        result["child"] = json.loads(child.stdout)
    print(json.dumps(result))
'''

MISSING = ("No module named 'deepspeed.nosuch': in this process deepspeed is zero_core (zero launch), and zero_core "
           "has no zero_core.nosuch; the DeepSpeed names zero answers are listed in docs/engine.md "
           "(\"DeepSpeed's calls\")")
ZERO_ORIGIN = str(Path(zero_core.__file__))


def _note(where: str) -> str:
    """The line an installed DeepSpeed gets on stderr, or "" where none is installed."""
    if not REAL_DEEPSPEED:
        return ""
    from importlib.metadata import version

    spec = PathFinder.find_spec("deepspeed")
    assert spec is not None and spec.submodule_search_locations is not None
    return (f"zero launch: DeepSpeed {version('deepspeed')} is installed ({spec.submodule_search_locations[0]}); "
            f"{where}, `import deepspeed` is zero_core {zero_core.__version__} instead\n")


def _reference(rank: int, world_size: int, program: str) -> dict[str, Any]:
    train = runpy.run_path(program, run_name="reference")["train"]
    return train(zero_core, rank)  # `import zero_core as deepspeed`


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Each rank's result of PROGRAM's loop with zero_core as `deepspeed`, on multirank's 2 ranks."""
    program = tmp_path_factory.mktemp("reference") / "train.py"
    program.write_text(PROGRAM)
    return run_ranks(_reference, 2, str(program), timeout=100)


def _launched(folder: Path, count: int) -> list[dict[str, Any]]:
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in range(count)]


def test_a_deepspeed_program_under_zero_launch_trains_as_import_zero_core_as_deepspeed(
        tmp_path: Path, reference: list[dict[str, Any]]) -> None:
    program = tmp_path / "train.py"
    program.write_text(PROGRAM)
    result = run_zero("launch", "--nproc_per_node", "2", str(program), "--out", str(tmp_path), timeout=110)
    assert result.returncode == 0, result.stderr
    launched = _launched(tmp_path, 2)
    for rank, (got, want) in enumerate(zip(launched, reference)):
        assert got["losses"] == want["losses"]  # exactly, in fp32
        assert got["argv"] == [f"--local_rank={rank}", "--out", str(tmp_path)]
        assert (got["local_rank"], got["version"], got["module"]) == (rank, ALIAS_VERSION, "zero_core")
    assert sorted(result.stdout.splitlines()) == sorted(f"losses {r['losses']} deepspeed {ALIAS_VERSION}"
                                                        for r in launched)
    note = _note("in the processes zero launch starts")
    assert result.stderr.count("is installed (") == (1 if note else 0)
    assert note in result.stderr


def test_two_nodes_on_localhost_train_as_one_node_with_two_processes(tmp_path: Path,
                                                                       reference: list[dict[str, Any]]) -> None:
    program = tmp_path / "train.py"
    program.write_text(PROGRAM)
    # torchrun's c10d rendezvous: the first agent to reach the endpoint hosts it, the other joins
    command = [sys.executable, "-m", "zero_cli", "launch", "--nnodes", "2", "--nproc_per_node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "two-nodes",
               str(program), "--out", str(tmp_path)]
    agents = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"}) for _ in range(2)]
    try:
        outputs = [agent.communicate(timeout=100) for agent in agents]
    finally:
        for agent in agents:
            agent.kill()
    assert [agent.returncode for agent in agents] == [0, 0], [err for _, err in outputs]
    launched = _launched(tmp_path, 2)
    assert [got["losses"] for got in launched] == [want["losses"] for want in reference]
    assert [(got["local_rank"], got["argv"][0]) for got in launched] == [(0, "--local_rank=0")] * 2


def _probe(tmp_path: Path, command: list[str], **env: str) -> dict[str, Any]:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    done = subprocess.run([sys.executable, *[str(probe) if word == "PROBE" else word for word in command]],
                          capture_output=True, text=True, timeout=100, env=environment)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return data


def test_launched_processes_and_theirs_see_zero_core_as_deepspeed(tmp_path: Path) -> None:
    seen = _probe(tmp_path, ["-m", "zero_cli", "launch", "--nproc_per_node", "1", "PROBE", "a", "b"])
    assert seen == {
        "argv": ["--local_rank=0", "a", "b"], "origin": ZERO_ORIGIN, "version": ALIAS_VERSION,
        "user_sitecustomize": None, "same_objects": True, "missing": [MISSING, "deepspeed.nosuch"],
        "accelerate_sees_deepspeed": True,
        # a process the program starts: aliased too, without DeepSpeed's argument
        "child": {"argv": ["--child"], "origin": ZERO_ORIGIN, "version": ALIAS_VERSION, "user_sitecustomize": None},
    }


def test_python_m_zero_core_launch_with_no_local_rank_still_runs_the_users_sitecustomize(tmp_path: Path) -> None:
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = 'yes'\n")
    pythonpath = os.pathsep.join([str(user), os.environ.get("PYTHONPATH", "")])
    seen = _probe(tmp_path, ["-m", "zero_core.launch", "--no_local_rank", "--nproc_per_node", "1", "PROBE", "a"],
                  PYTHONPATH=pythonpath)
    assert (seen["argv"], seen["origin"], seen["user_sitecustomize"]) == (["a"], ZERO_ORIGIN, "yes")
    assert seen["child"] == {"argv": ["--child"], "origin": ZERO_ORIGIN, "version": ALIAS_VERSION,
                             "user_sitecustomize": "yes"}


def test_plain_python_sees_no_alias(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    code = f"import runpy, json; print(json.dumps(runpy.run_path({str(probe)!r})['seen']()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(done.stdout)
    if REAL_DEEPSPEED:
        from importlib.metadata import version

        assert (seen["origin"], seen["version"]) == (importlib.util.find_spec("deepspeed").origin,  # type: ignore[union-attr]
                                                     version("deepspeed"))
        assert "+zero" not in seen["version"]
    else:
        assert (seen["origin"], seen["version"]) == (None, None)


def test_a_failed_rank_is_the_launchers_exit_status(tmp_path: Path) -> None:
    program = tmp_path / "fail.py"
    program.write_text("import sys\nsys.exit(3)\n")
    result = run_zero("launch", "--nproc_per_node", "1", str(program), timeout=60)
    assert result.returncode == 3, result.stderr
    assert "exitcode  : 3" in result.stderr


def test_the_ranks_get_the_launch_environment_and_the_launcher_keeps_its_own(tmp_path: Path) -> None:
    program = tmp_path / "show.py"
    program.write_text("import os\nprint(os.environ['PYTHONPATH'].split(os.pathsep)[0])\n")
    # torchrun's agent sets variables of its own (TORCHELASTIC_SIGNALS_TO_HANDLE): zero launch's are compared
    code = ("import os, zero_core.launch\n"
            "ours = lambda: [os.environ.get(name) for name in ('PYTHONPATH', 'ZERO_LAUNCH_LOCAL_RANK_ARGUMENT')]\n"
            f"before = ours()\nstatus = zero_core.launch.launch(['--nproc_per_node', '1', {str(program)!r}])\n"
            "print(status, ours() == before)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.stdout.splitlines() == [str(SITE_FOLDER), "0 True"], done.stderr


NOTEBOOK = ("import zero_core.launch; zero_core.launch.as_deepspeed(); zero_core.launch.as_deepspeed()\n"
            "import importlib.metadata, deepspeed, deepspeed.zero, zero_core\n"
            "print(deepspeed is zero_core, deepspeed.zero is zero_core.zero, importlib.metadata.version('deepspeed'))")


def test_the_notebook_opt_in_aliases_its_process_once() -> None:
    done = subprocess.run([sys.executable, "-c", NOTEBOOK], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"True True {ALIAS_VERSION}\n"), done.stderr
    assert done.stderr == _note("in this process")


@pytest.mark.skipif(not REAL_DEEPSPEED, reason="DeepSpeed is not installed here")
def test_the_notebook_opt_in_refuses_a_process_that_imported_deepspeed() -> None:
    code = "import deepspeed\nimport zero_core.launch\nzero_core.launch.as_deepspeed()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    origin = importlib.util.find_spec("deepspeed").origin  # type: ignore[union-attr]
    assert done.stderr.splitlines()[-1] == (
        f"zero_core.launch._alias.DeepSpeedAlreadyImported: deepspeed is imported already in this process (from "
        f"{origin}), so it cannot become zero_core; call zero_core.launch.as_deepspeed() before anything imports "
        "deepspeed (in a notebook: restart the kernel and make it the first cell)")


@pytest.mark.parametrize(("name", "target"), [("deepspeed", "zero_core"), ("deepspeed.zero", "zero_core.zero"),
                                              ("deepspeed.ops.adam", "zero_core.ops.adam"), ("deepspeedx", None),
                                              ("zero_core", None), ("my.deepspeed", None)])
def test_deepspeed_paths_map_to_zero_core_paths(name: str, target: str | None) -> None:
    assert target_name(name) == target


def test_the_finder_names_a_missing_module_and_answers_only_for_deepspeed() -> None:
    finder = DeepSpeedAlias()
    with pytest.raises(ModuleNotFoundError) as caught:
        finder.find_spec("deepspeed.nosuch")
    assert (str(caught.value), caught.value.name) == (MISSING, "deepspeed.nosuch")
    spec = finder.find_spec("deepspeed.zero")
    assert spec is not None and (spec.name, spec.origin) == ("deepspeed.zero", zero_core.zero.__spec__.origin)
    assert finder.find_spec("deepspeedx") is None
    assert [d.version for d in finder.find_distributions(DistributionFinder.Context(name="DeepSpeed"))] == [
        ALIAS_VERSION]
    assert list(finder.find_distributions(DistributionFinder.Context(name="deep-speed"))) == []
    dist = ZeroAsDeepSpeed()
    assert (dist.metadata["Name"], dist.files, dist.requires, list(dist.entry_points)) == ("deepspeed", None, None,
                                                                                           [])
