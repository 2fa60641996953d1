"""Every input in bad_inputs.py is refused in one line that names it: ConfigError from load_config,
exit status 2 from the `zero` command. Never a traceback, never a silent run.

The CLI cases run in this process (zero_cli.main); only the environment-variable cases start a fresh
interpreter, because the accelerator and backend selections are read once per process. A named pipe
blocks a plain read forever, so the cases that read files run under a timeout: a hang fails them.
"""
from __future__ import annotations

import json
import os
import warnings
from typing import Any
from pathlib import Path

import pytest
from zero_plugins.ds_config import ConfigError, load_config

from bad_inputs import (
    CHECKPOINT_DESCRIPTION, CHECKPOINT_DESCRIPTIONS, CHECKPOINT_MANIFESTS, CLI, CONFIGS, DEEPSPEED_CALLS, ENV, FILES,
    REMOVED, SOURCES,
    SPECIAL_FILES,
)
from zero_plugins import MAX_CONFIG_BYTES
from cli_helpers import run_main, run_zero

PYDANTIC_WORDING = ("Input should be", "validation error for", "type=", "For further information visit")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each FILES entry written under a fresh directory: name -> path; "dir" is the directory itself."""
    folder = tmp_path_factory.mktemp("bad_inputs")
    paths = {"dir": str(folder), "nosuch": str(folder / "nosuch")}
    for name, content in FILES.items():
        (folder / name).write_bytes(content)
        paths[name] = str(folder / name)
    os.mkfifo(folder / "fifo")  # nothing ever writes to it: a read that waits for a writer never ends
    with open(folder / "oversized", "wb") as oversized:
        oversized.truncate(MAX_CONFIG_BYTES + 1)  # sparse: no 16 MiB written
    os.symlink(folder, folder / "link", target_is_directory=True)
    os.symlink(folder / "nowhere", folder / "dangling")
    paths.update({name: str(folder / name) for name in SPECIAL_FILES})
    return paths


def _one_line(message: str) -> None:
    assert message.strip(), "no message"
    assert len(message.strip().splitlines()) == 1, f"not one line:\n{message}"
    for words in PYDANTIC_WORDING:
        assert words not in message, message


def _load(source: object) -> ConfigError:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ConfigError) as caught:
            load_config(source, world_size=1)  # type: ignore[arg-type]
    return caught.value


@pytest.mark.parametrize(("config", "key"), CONFIGS, ids=[f"config-{i}-{key}" for i, (_, key) in enumerate(CONFIGS)])
def test_bad_ds_configs_are_one_config_error_naming_the_key(config: dict[str, Any], key: str) -> None:
    message = str(_load(config))
    _one_line(message)
    assert key in message, message


# Seconds a file-reading case may take: a blocked read of the FIFO fails here instead of stalling the suite.
READ_TIMEOUT = 60


@pytest.mark.timeout(READ_TIMEOUT)
@pytest.mark.parametrize(("source", "word"), SOURCES, ids=[f"source-{i}" for i in range(len(SOURCES))])
def test_bad_config_sources_are_one_config_error(files: dict[str, str], source: object, word: str) -> None:
    if isinstance(source, str) and source.startswith("file:"):
        name = source.removeprefix("file:")
        source = files[name]
        # A problem with the file names the file; a bad value in it, its key.
        word_or_file = (word,) if "." in word else (word, Path(source).name)
    elif source == "dir":
        source = files["dir"]
        word_or_file = (word, source)
    else:
        word_or_file = (word,)
    message = str(_load(source))
    _one_line(message)
    for expected in word_or_file:
        assert expected in message, message


def _argv(args: list[str], files: dict[str, str]) -> list[str]:
    return [arg.format(**files) if "{" in arg else arg for arg in args]


@pytest.mark.timeout(READ_TIMEOUT)
@pytest.mark.parametrize(("args", "named"), CLI, ids=[" ".join(args) for args, _ in CLI])
def test_bad_cli_arguments_exit_2_with_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str],
                                                               files: dict[str, str], args: list[str],
                                                               named: str) -> None:
    try:
        code, out, err = run_main(capsys, *_argv(args, files))
    except SystemExit as exit_:  # argparse's own usage errors
        code = exit_.code
        out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    _one_line(err)
    assert err.startswith("zero"), err
    assert named.format(**files) in err, err


@pytest.mark.parametrize(("variable", "value", "args"), ENV, ids=[f"{v}={x} {' '.join(a)}" for v, x, a in ENV])
def test_bad_environment_variables_exit_2_naming_the_variable(files: dict[str, str], variable: str, value: str,
                                                             args: list[str]) -> None:
    result = run_zero(*_argv(args, files), timeout=120, **{variable: value})
    assert result.returncode == 2, (result.returncode, result.stderr)
    _one_line(result.stderr)
    assert variable in result.stderr and value in result.stderr, result.stderr


def test_a_fifo_config_ends_the_command_at_once(files: dict[str, str]) -> None:
    # A fresh interpreter with a hard timeout: a read that blocks on the pipe is killed and fails the test.
    result = run_zero("estimate", "--config", files["fifo"], timeout=READ_TIMEOUT)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (f"zero: error: cannot read {files['fifo']}: is a named pipe (FIFO), not a regular file; "
                             "save the config to a file and pass that\n")


@pytest.mark.parametrize(("change", "key"), CHECKPOINT_DESCRIPTIONS,
                         ids=[f"description-{i}-{key}" for i, (_, key) in enumerate(CHECKPOINT_DESCRIPTIONS)])
def test_damaged_checkpoint_descriptions_are_one_checkpoint_error_naming_the_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], key: str) -> None:
    from zero_core.checkpoint import CheckpointError
    from zero_core.checkpoint._describe import Description

    tag = tmp_path / "checkpoints" / "global_step2"
    tag.mkdir(parents=True)
    data = {k: v for k, v in {**CHECKPOINT_DESCRIPTION, **change}.items() if v is not REMOVED}
    (tag / "zero_checkpoint.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError) as caught:
        Description.read(tag)
    message = str(caught.value)
    _one_line(message)
    assert message.startswith(f"{tag / 'zero_checkpoint.json'} is damaged: `{key}` "), message
    # `zero checkpoint inspect` lists the tag as incomplete with that line, exit 1, no traceback.
    code, out, err = run_main(capsys, "checkpoint", "inspect", str(tag.parent), "--json")
    assert (code, err) == (1, "")
    assert message in json.loads(out)["tags"][0]["problems"]


@pytest.mark.parametrize(("content", "word"), CHECKPOINT_MANIFESTS,
                         ids=[f"manifest-{i}" for i in range(len(CHECKPOINT_MANIFESTS))])
def test_damaged_manifests_read_as_a_damaged_tag(tmp_path: Path, content: bytes, word: str) -> None:
    from zero_core.checkpoint._manifest import Integrity
    from zero_core.checkpoint._verify import integrity_problems

    (tmp_path / "zero_manifest.json").write_bytes(content)
    integrity, problems = integrity_problems(tmp_path)
    assert integrity is Integrity.DAMAGED and len(problems) == 1, problems
    _one_line(problems[0])
    assert word in problems[0] and "zero_manifest.json" in problems[0], problems[0]


@pytest.mark.parametrize(("target", "kwargs", "word"), DEEPSPEED_CALLS,
                         ids=[f"deepspeed-{i}-{word}" for i, (_, _, word) in enumerate(DEEPSPEED_CALLS)])
def test_bad_calls_of_deepspeeds_names_are_one_zero_error(target: str, kwargs: dict[str, Any] | None,
                                                          word: str) -> None:
    import importlib

    from zero_plugins import ZeroError

    module, path = target.split(":")
    with pytest.raises(ZeroError) as caught:
        found: Any = importlib.import_module(module)
        for name in path.split("."):
            found = getattr(found, name.removesuffix("()"))
            if name.endswith("()"):
                found = found()
        if kwargs is not None:
            found(**kwargs)
    message = str(caught.value)
    _one_line(message)
    assert word in message, message


def test_the_corpus_is_large() -> None:
    assert len(CONFIGS) + len(SOURCES) + len(CLI) + len(ENV) >= 100
