"""Helpers for the environment and launcher tests: running launchers and `medvision-bm envs`, reading results.

Builds use the uv cache, so a cold build here takes seconds. CPU torch comes from TORCH_FIND_LINKS (default
/opt/wheels); without a local CPU torch source the building tests are skipped rather than letting uv reach
for a multi-GB CUDA build.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TORCH_WHEELS = os.environ.get("TORCH_FIND_LINKS") or "/opt/wheels"
TIMINGS: list[tuple[str, float]] = []


def can_build() -> str | None:
    """Why the building tests cannot run here, or None."""
    for tool in ("uv", "flock", "bash"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH"
    if not Path(TORCH_WHEELS).is_dir():
        return f"no local CPU torch wheels at {TORCH_WHEELS} (set TORCH_FIND_LINKS)"
    return None


needs_build = pytest.mark.skipif(can_build() is not None, reason=str(can_build()))


def record_time(what: str, seconds: float) -> None:
    TIMINGS.append((what, seconds))


def base_env(**extra: str) -> dict[str, str]:
    """The caller's environment without dataset-contract or env-selection variables, plus ``extra``."""
    drop = ("MedVision_", "BENCHMARK_DIR", "ENVS_ROOT", "ENV_TOOL", "INSTALL_METHOD", "DATA_DIR", "RESULTS_DIR",
            "TASKS_LIST", "STATUS_FILE", "TASK_TAG", "MODEL_", "BATCH_SIZE", "RESHAPE_IMAGE_HW", "TORCH_",
            "MEDVISION_ENV_LOCK_HELD", "VIRTUAL_ENV", "OPENAI_", "OPENROUTER_", "ANTHROPIC_", "GEMINI_", "GOOGLE_",
            "MOONSHOT_", "MINIMAX_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["TORCH_FIND_LINKS"] = TORCH_WHEELS
    env.update(extra)
    return env


@dataclass
class Run:
    proc: subprocess.CompletedProcess
    seconds: float

    @property
    def out(self) -> str:
        return self.proc.stdout + self.proc.stderr

    @property
    def rc(self) -> int:
        return self.proc.returncode


def launch_popen(launcher: str, *args: str, env: dict[str, str]) -> subprocess.Popen:
    path = Path(env.get("BENCHMARK_DIR") or REPO) / launcher
    return subprocess.Popen(["bash", str(path), *args], env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=env.get("TEST_CWD", str(REPO)))


def launch(launcher: str, *args: str, env: dict[str, str], timeout: float = 600) -> Run:
    start = time.monotonic()
    proc = launch_popen(launcher, *args, env=env)
    out, err = proc.communicate(timeout=timeout)
    return Run(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), time.monotonic() - start)


def envs_cli(*args: str, env: dict[str, str], timeout: float = 600) -> Run:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "medvision_bm.cli", "envs", *args], env=env, text=True,
                          capture_output=True, timeout=timeout, cwd=str(REPO))
    return Run(proc, time.monotonic() - start)


def one_task_lists(folder: Path) -> dict[str, Path]:
    """Per family, a tasks list holding the first task of the committed phantom list."""
    out = {}
    for fam in ("AD", "TL", "detect"):
        tasks = json.loads((REPO / "tasks_list" / f"tasks_MedVision-Phantom-{fam}.json").read_text())
        first = sorted(tasks)[0]
        path = folder / f"tasks_one_{fam}.json"
        path.write_text(json.dumps({first: tasks[first]}))
        out[fam] = path
    return out


def results_json(out: str) -> list[dict]:
    """The results.json files of the run whose output is ``out`` (the entry point prints `results: FOLDER`)."""
    folders = re.findall(r"^results: (.+)$", out, flags=re.M)
    assert len(folders) == 1, out[-3000:]
    return [json.loads(p.read_text()) for p in sorted(Path(folders[0]).glob("*/*/results.json"))]


def marker(prefix: Path) -> dict:
    return json.loads((prefix / "medvision-env.json").read_text())


def frozen_checkout(work: Path) -> Path:
    """One copy of the checkout per session: builds see a fixed source even while someone edits the repo."""
    dest = work / "checkout"
    if not dest.exists():
        part = work / "checkout.part"
        part.mkdir()
        copy_checkout(part)
        part.rename(dest)
    return dest


def copy_checkout(dest: Path) -> Path:
    """A private copy of the checkout (what a build reads) that a test may change."""
    return copy_checkout_from(REPO, dest)


def copy_checkout_from(source: Path, dest: Path) -> Path:
    for rel in ("pyproject.toml", "README.md"):
        shutil.copy2(source / rel, dest / rel)
    for rel in ("src", "requirements", "script", "tasks_list"):
        shutil.copytree(source / rel, dest / rel, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def run_env(work: Path, name: str, envs_root: Path, data: Path, tasks: Path, **extra: str) -> dict[str, str]:
    """Launcher variables for one run; BENCHMARK_DIR is the session's frozen copy of the checkout."""
    extra.setdefault("BENCHMARK_DIR", str(frozen_checkout(work)))
    return base_env(ENVS_ROOT=str(envs_root), DATA_DIR=str(data), TASKS_LIST=str(tasks),
                    RESULTS_DIR=str(work / name / "Results"), STATUS_FILE=str(work / name / "status.json"),
                    **extra)
