"""bench/programs_latency.py on the programs it finds through ZERO_DEEPSPEED_CHAT and ZERO_RUN_CLM: a short run
counts exactly the steps after warm-up on both sides, without host CPU figures, and naming such a program with
its variable unset is refused with how to get it. The full run is the bench's (docs/benchmarks.md, "Per-step
latency"). The run needs both programs and DeepSpeed 0.19.8, and skips without them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from programs._launch_runs import needs_deepspeed

BENCH = Path(__file__).resolve().parents[2] / "bench" / "programs_latency.py"
VARIABLES = ("ZERO_DEEPSPEED_CHAT", "ZERO_RUN_CLM")
pytestmark = pytest.mark.timeout(200)


@needs_deepspeed
@pytest.mark.skipif(not all(os.environ.get(name) for name in VARIABLES),
                    reason=f"set {' and '.join(VARIABLES)} (tests/integration/test_dschat_under_zero_launch.py and "
                           "test_run_clm_under_zero_launch.py say how to get the programs)")
def test_external_programs_count_the_steps_after_warm_up(tmp_path: Path) -> None:
    out = tmp_path / "latency.json"
    done = subprocess.run([sys.executable, str(BENCH), "--rounds", "1", "--steps", "4", "--programs",
                           "dschat-main-offload-stage3", "run_clm-stage3", "--json", str(out)],
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    programs = json.loads(out.read_text())["programs"]
    # DeepSpeed-Chat: 4 printed steps, 2 counted; run_clm: 3 intervals between 4 logged steps, 1 counted
    for name, counted in (("dschat-main-offload-stage3", 2), ("run_clm-stage3", 1)):
        for framework in ("zero", "deepspeed"):
            figures = programs[name][framework]
            assert figures["steps"] == counted, (name, framework, figures)
            assert figures["host_cpu_s"] is None
            assert figures["step_s"] > 0
    assert "run_clm-stage3 " in done.stdout and "dschat-main-offload-stage3 " in done.stdout


def test_an_external_program_without_its_variable_is_refused() -> None:
    environment = {key: value for key, value in os.environ.items() if key != "ZERO_RUN_CLM"}
    done = subprocess.run([sys.executable, str(BENCH), "--programs", "run_clm-stage3"], capture_output=True,
                          text=True, timeout=60, env=environment, check=False)
    assert done.returncode == 2
    assert "--programs run_clm-stage3 needs its program: set ZERO_RUN_CLM to a copy of transformers' run_clm.py" \
        in done.stderr
