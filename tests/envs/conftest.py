"""Fixtures for the environment and launcher tests: real uv builds under tmp envs roots, shared per session.

Builds use the uv cache, so a cold build here takes seconds. CPU torch comes from TORCH_FIND_LINKS (default
/opt/wheels); without a local CPU torch source the building tests are skipped rather than letting uv reach
for a multi-GB CUDA build.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from envs_support import TIMINGS, Run, can_build, launch_popen, one_task_lists, record_time, run_env


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TIMINGS:
        terminalreporter.section("environment and launcher timings")
        for what, seconds in TIMINGS:
            terminalreporter.write_line(f"{seconds:8.2f} s  {what}")


@pytest.fixture(scope="session")
def envs_work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("envs-work")


@pytest.fixture(scope="session")
def task_lists(envs_work) -> dict[str, Path]:
    folder = envs_work / "tasks"
    folder.mkdir()
    return one_task_lists(folder)


@pytest.fixture(scope="session")
def shared_data(envs_work) -> Path:
    """A data folder no launcher has prepared yet (the first one writes the phantom data into it)."""
    return envs_work / "Data"


@pytest.fixture(scope="session")
def cpu_cold(envs_work, task_lists, shared_data):
    """Two eval-cpu launchers started at once on a fresh envs root: one builds, the other waits and reuses."""
    if can_build():
        pytest.skip(can_build())
    root = envs_work / "envs-cpu"
    env_a = run_env(envs_work, "cold-a", root, shared_data, task_lists["AD"])
    env_b = run_env(envs_work, "cold-b", root, shared_data, task_lists["detect"])
    start = time.monotonic()
    pa = launch_popen("script/benchmark-AD/oracle.sh", "--sample_limit", "2", "--no_progress", env=env_a)
    pb = launch_popen("script/benchmark-detect/random-box.sh", "--sample_limit", "2", "--no_progress", env=env_b)
    out_a = pa.communicate(timeout=900)
    out_b = pb.communicate(timeout=900)
    seconds = time.monotonic() - start
    record_time("eval-cpu cold: two launchers at once, env built from nothing + 2 runs", seconds)
    runs = {
        "a": Run(subprocess.CompletedProcess(pa.args, pa.returncode, *out_a), seconds),
        "b": Run(subprocess.CompletedProcess(pb.args, pb.returncode, *out_b), seconds),
    }
    return {"root": root, "runs": runs, "env": {"a": env_a, "b": env_b}}
