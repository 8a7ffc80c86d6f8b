"""Flags that name a file or folder are refused, in one line naming the flag and the path, before a backend is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from medvision_bm.cli.run import main_for
from medvision_bm.errors import UserError
from medvision_bm.runner import backends, loop
from mvtest_support import REPO, TEST_CONTRACT_ENV

TASKS = REPO / "tasks_list" / "tasks_MedVision-Phantom-detect.json"


class ReachedRunner(UserError):
    """Raised by the stand-in runner: the flags were accepted and the run would start."""


@pytest.fixture
def spy(monkeypatch, tmp_path):
    """The backends built and the runs started by an in-process entry point (neither loads anything)."""
    for key, value in TEST_CONTRACT_ENV.items():
        monkeypatch.setenv(key, value)
    built: list[object] = []
    started: list[object] = []

    def build_backend(cfg, data):
        built.append(cfg)
        raise AssertionError("a backend was built")

    class Runner:
        def __init__(self, cfg, factory):
            started.append(cfg)

        def run(self):
            raise ReachedRunner("reached the runner")

    monkeypatch.setattr(backends, "build_backend", build_backend)
    monkeypatch.setattr(loop, "Runner", Runner)
    return built, started


def _argv(tmp_path: Path, phantom_dir: Path, *extra: str) -> list[str]:
    return ["--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS), "--results_dir",
            str(tmp_path / "res"), "--task_status_json_path", str(tmp_path / "status.json"), "--skip_env_setup", *extra]


def _adapter(tmp_path: Path) -> Path:
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text('{"r": 8}')
    return folder


def test_a_missing_lora_path_is_refused_before_any_backend(spy, tmp_path, phantom_dir, capsys):
    built, started = spy
    assert main_for("medgemma", _argv(tmp_path, phantom_dir, "--lora_path", "/nonexistent")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--lora_path /nonexistent does not exist" in err and "Traceback" not in err
    assert built == [] and started == []
    # the same command with a real adapter folder gets past the check to the run itself
    assert main_for("medgemma", _argv(tmp_path, phantom_dir, "--lora_path", str(_adapter(tmp_path)))) == 2
    assert "reached the runner" in capsys.readouterr().err and len(started) == 1 and built == []


@pytest.mark.parametrize(("model", "make", "flag", "says"), [
    ("medgemma", lambda t: t / "file.txt", "--lora_path", "is not a folder"),
    ("medgemma", lambda t: t / "empty", "--lora_path", "has no adapter_config.json"),
    ("medgemma", lambda t: t / "file.txt", "--results_dir", "is a file, not a folder"),
    ("medgemma", lambda t: t / "empty", "--task_status_json_path", "is a folder"),
    ("medgemma", lambda t: t / "missing", "--upstream_results", "is not a folder"),
    ("claude", lambda t: t / "missing.yaml", "--price_table", "does not exist"),
    ("claude", lambda t: t / "empty", "--price_table", "is not a file"),
    ("healthgpt", lambda t: t / "file.txt", "--dir_third_party", "is a file, not a folder"),
])
def test_path_flags_of_the_wrong_kind_are_refused_in_one_line(spy, tmp_path, phantom_dir, capsys, model, make, flag,
                                                             says):
    built, started = spy
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    value = str(make(tmp_path))
    argv = _argv(tmp_path, phantom_dir)
    if flag in argv:  # replace the default value
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    assert main_for(model, argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{flag} {value} {says}" in err
    assert built == [] and started == []
