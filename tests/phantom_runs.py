"""Baseline runs for the report tests: the real runner (selection, store, signatures, scoring, results files)
with the direct harness (``runner.harness.DirectHarness``, what a baseline runs with) for any backend, so a family
runs in well under a second. `test_direct_runs_match_the_cli` checks both produce the same stores.

The phantom's task lists come from the session's ``phantom_lists`` fixture (counted from the phantom at the tests'
annotation pin, ``mvtest_support.TEST_CONTRACT_ENV``, which tests/conftest.py exports for in-process runs)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from medvision_bm.models.base import Backend
from medvision_bm.models.registry import get_record
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.backends import build_backend
from medvision_bm.runner.config import build_config
from medvision_bm.runner.harness import DirectHarness
from medvision_bm.runner.loop import Runner
from mvtest_support import REPO, TEST_CONTRACT_ENV


class DirectRunner(Runner):
    def harness(self) -> DirectHarness:
        return DirectHarness(self.backend())


def run_baseline(model: str, family: str, data_dir: Path, results_dir: Path, *extra: str, lists: Path,
                 backend: Callable[..., Backend] | None = None, tasks_json: Path | None = None) -> list:
    """Run a baseline model on the phantom tasks of ``family`` (``lists``: the phantom_lists fixture's folder)."""
    record = get_record(model)
    tasks = tasks_json or lists / f"tasks_MedVision-Phantom-{family}.json"
    argv = ["--data_dir", str(data_dir), "--tasks_list_json_path", str(tasks), "--results_dir", str(results_dir),
            "--skip_update_status", "--skip_env_setup", "--no_progress", *extra]
    cfg = build_config(build_parser(record, "medvision-bm run").parse_args(argv), record,
                       ["medvision-bm", "run", "--model", model, *argv])
    return DirectRunner(cfg, backend or build_backend).run()


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a CLI call: no MedVision_ variable from the caller (summarize and parse need none), unless
    ``extra`` sets it (a `run` passes TEST_CONTRACT_ENV)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MedVision_")}
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    env.update(extra or {})
    return env


RUN_ENV = dict(TEST_CONTRACT_ENV)


def run_cli(*args: str, timeout: float = 300, module: str = "medvision_bm.cli",
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`medvision-bm ...` (or ``python -m module ...``) in a fresh interpreter, as a user runs it."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=cli_env(env), capture_output=True,
                          text=True, timeout=timeout)
