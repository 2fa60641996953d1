"""The programs bench/programs_latency.py finds through an environment variable and runs as they are, never part
of this repository: DeepSpeed-Chat's step-1 `main.py` (ZERO_DEEPSPEED_CHAT) and transformers' `run_clm.py`
(ZERO_RUN_CLM). Their inputs are made locally, as their tests' harnesses make them (bench/programs/).

These programs cannot carry the bench's step clock, so each step's wall time comes from what the program prints:
- DeepSpeed-Chat: its own `Latency: N.NNs` line per step (print_throughput, rank 0's time from the batch's move
  to the device to the end of `model.step()`; printed to 10 ms);
- run_clm: the wall time between the arrival of two consecutive logged steps (`--logging_steps 1`, the Trainer's
  printed log of each step, rank 0's), read from its unbuffered output as it arrives: a step plus its logging.
  trainer_state.json's log_history holds no time per step. The first logged step has no predecessor, so a run of
  N steps gives N - 1 intervals.
Neither gives a step's process CPU time.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path

PROGRAMS = Path(__file__).resolve().parent / "programs"
sys.path.insert(0, str(PROGRAMS))
import dschat_inputs  # noqa: E402
import local_assets  # noqa: E402
from dschat_inputs import Run  # noqa: E402

ON_DEEPSPEED = PROGRAMS / "on_deepspeed.py"
RUN_CLM_VARIABLE = "ZERO_RUN_CLM"
RUN_CLM_URL = "https://github.com/huggingface/transformers/blob/main/examples/pytorch/language-modeling/run_clm.py"
TIMEOUT_S = 600
# run_clm's stage-3 ds_config: every value the Trainer fills in left "auto"
AUTO_STAGE3 = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
               "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
               "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                         "weight_decay": "auto"}},
               "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                                     "stage3_param_persistence_threshold": "auto"}}


def launch_command(framework: str, launcher_options: list[str], arguments: list[str],
                    comm_first: bool = False) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run `arguments` (a program and its arguments) on 2 CPU ranks: under zero
    launch, or under torchrun on DeepSpeed through bench/programs/on_deepspeed.py."""
    environment = {key: value for key, value in os.environ.items() if key != "DS_ACCELERATOR"}
    environment["OMP_NUM_THREADS"] = "1"
    if framework == "zero":
        return [sys.executable, "-m", "zero_cli", "launch", "--nproc_per_node", "2", *launcher_options,
                *arguments], environment
    environment["DS_ACCELERATOR"] = "cpu"
    runner = [str(ON_DEEPSPEED), *(["--comm-first"] if comm_first else [])]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", *launcher_options, *runner,
            *arguments], environment


def _failed(name: str, framework: str, code: int, errors: str) -> SystemExit:
    return SystemExit(f"{name} on {framework} failed (exit {code}):\n{errors[-4000:]}")


def _note_exit(name: str, framework: str, code: int) -> None:
    """A run that printed every step and then exited non-zero is kept, and said so: gloo's teardown at
    interpreter exit aborts a rank now and then."""
    if code != 0:
        print(f"note: {name} on {framework} exited {code} after printing every step; its steps are kept", flush=True)


class ExternalProgram(ABC):
    """A program found through `variable`; `prepare` makes its inputs once, `step_seconds` runs it once."""

    variable: str
    how_to_get: str

    def found(self) -> bool:
        """Whether `variable` is set; set to something that is not the program, it is an error."""
        value = os.environ.get(self.variable)
        if not value:
            return False
        self._check(Path(value))
        return True

    @abstractmethod
    def _check(self, path: Path) -> None:
        """Raises SystemExit naming the variable where `path` is not the program."""

    @abstractmethod
    def prepare(self, folder: Path) -> None:
        """Makes the program's local inputs under `folder`."""

    @abstractmethod
    def step_seconds(self, framework: str, steps: int, work: Path) -> list[float]:
        """One run of `steps` optimizer steps (in the empty folder `work`): the wall seconds of each timed step."""


class DeepSpeedChatStep1(ExternalProgram):
    """DeepSpeed-Chat's step-1 (SFT) main.py on a tiny OPT, as tests/integration/test_dschat_under_zero_launch.py
    runs it; one epoch is dschat_inputs.STEPS steps, so a run gets whole epochs (its evaluation in between)."""

    variable = dschat_inputs.CHECKOUT_VARIABLE
    how_to_get = dschat_inputs.HOW_TO_GET

    def __init__(self, run: Run) -> None:
        self.run = run
        self._inputs: tuple[Path, Path] | None = None

    def _check(self, path: Path) -> None:
        try:
            dschat_inputs.find_checkout()
        except dschat_inputs.CheckoutError as error:
            raise SystemExit(str(error)) from error

    def prepare(self, folder: Path) -> None:
        checkout = dschat_inputs.find_checkout()
        assert checkout is not None, "prepare follows found()"
        self._inputs = dschat_inputs.stage_checkout(checkout, folder), dschat_inputs.write_model(folder / "model")

    def step_seconds(self, framework: str, steps: int, work: Path) -> list[float]:
        assert self._inputs is not None, "step_seconds follows prepare()"
        copy, model = self._inputs
        epochs = math.ceil(steps / dschat_inputs.STEPS)
        # argparse keeps the last --num_train_epochs: program_arguments gives 1
        arguments = [*dschat_inputs.program_arguments(self.run, copy, model, work), "--num_train_epochs", str(epochs)]
        logs = work / "logs"
        # each rank's output to its own file: the ranks' prints interleave on a shared pipe
        command, environment = launch_command(framework, ["--redirects", "3", "--log-dir", str(logs)], arguments)
        environment.update(dschat_inputs.program_environment(copy))
        done = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=work, timeout=TIMEOUT_S)
        output = "".join(path.read_text() for path in logs.glob("*/attempt_*/0/stdout.log"))
        latencies = dschat_inputs.step_latencies(output)
        if len(latencies) != epochs * dschat_inputs.STEPS:
            errors = "".join(path.read_text() for path in sorted(logs.glob("*/attempt_*/*/stderr.log")))
            raise _failed(self.run.name, framework, done.returncode, f"{len(latencies)} Latency lines of "
                          f"{epochs * dschat_inputs.STEPS}\n{errors}{done.stderr}")
        _note_exit(self.run.name, framework, done.returncode)
        return latencies[:steps]


class RunClm(ExternalProgram):
    """transformers' run_clm.py with `--deepspeed` (a stage-3 "auto" config), bf16, on a tiny GPT-NeoX and local
    text (bench/programs/local_assets.py), as tests/integration/test_run_clm_under_zero_launch.py runs it; 2
    blocks of 16 tokens per rank and step, no gradient accumulation, no checkpoint saved."""

    variable = RUN_CLM_VARIABLE
    how_to_get = f"set {RUN_CLM_VARIABLE} to a copy of transformers' run_clm.py ({RUN_CLM_URL})"

    def __init__(self) -> None:
        self._assets: Path | None = None

    def _check(self, path: Path) -> None:
        if not path.is_file():
            raise SystemExit(f"{self.variable}={path} is not a file: {self.how_to_get}")

    def prepare(self, folder: Path) -> None:
        local_assets.save_tokenizer(folder / "tokenizer")
        local_assets.save_gpt_neox(folder / "model", seed=0)
        local_assets.write_text(folder / "train.txt", lines=64, seed=1)
        (folder / "ds.json").write_text(json.dumps(AUTO_STAGE3))
        self._assets = folder

    def step_seconds(self, framework: str, steps: int, work: Path) -> list[float]:
        assets = self._assets
        assert assets is not None, "step_seconds follows prepare()"
        arguments = [os.environ[self.variable], "--model_name_or_path", str(assets / "model"),
                     "--tokenizer_name", str(assets / "tokenizer"), "--train_file", str(assets / "train.txt"),
                     "--deepspeed", str(assets / "ds.json"), "--do_train", "--block_size", "16", "--bf16",
                     "--per_device_train_batch_size", "2", "--learning_rate", "1e-3", "--max_steps", str(steps),
                     "--logging_steps", "1", "--save_strategy", "no", "--disable_tqdm", "true",
                     "--report_to", "none", "--seed", "0", "--use_cpu", "--output_dir", str(work / "output")]
        command, environment = launch_command(framework, [], arguments, comm_first=True)
        environment.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                           HF_HOME=str(work / "hf"))
        arrivals: list[float] = []
        with open(work / "stderr.log", "w+") as errors, subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=errors, text=True, env=environment, cwd=work) as process:
            watchdog = threading.Timer(TIMEOUT_S, process.kill)
            watchdog.start()
            assert process.stdout is not None
            for line in process.stdout:  # the Trainer prints each step's log dict on rank 0
                if line.startswith("{'loss'"):
                    arrivals.append(time.perf_counter())
            watchdog.cancel()
            code = process.wait()
            errors.seek(0)
            if len(arrivals) != steps:
                raise _failed("run_clm", framework, code, f"{len(arrivals)} logged steps of {steps}\n"
                              + errors.read())
        _note_exit("run_clm", framework, code)
        return [later - earlier for earlier, later in zip(arrivals, arrivals[1:])]


# name -> program: the rows of the bench's table that need a program from outside
EXTERNAL: dict[str, ExternalProgram] = {
    "dschat-main-lora-gc-stage3": DeepSpeedChatStep1(Run(1, 3, lora=True, gradient_checkpointing=True)),
    "dschat-main-offload-stage3": DeepSpeedChatStep1(Run(1, 3, offload=True)),
    "run_clm-stage3": RunClm(),
}
