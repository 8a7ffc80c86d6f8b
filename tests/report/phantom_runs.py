"""Baseline runs for the report tests: the real runner (selection, store, signatures, scoring, results files)
with lmms-eval's task loop swapped for a direct loop over the same requests, so a family runs in well under a
second instead of several. `test_direct_runs_match_the_cli` checks both produce the same stores."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from medvision_bm.models.base import Backend, GenRequest
from medvision_bm.models.factory import build_backend
from medvision_bm.models.registry import get_record
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config
from medvision_bm.runner.harness import TaskRun
from medvision_bm.runner.loop import Runner
from medvision_bm.tasks.hooks import visual
from medvision_bm.tasks.prompts import build_prompt
from mvtest_support import REPO


class DirectHarness:
    """Asks the backend for every rundoc of a task, as lmms-eval's loop with our StreamingLMM does."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def run(self, spec: TaskRun) -> list[dict[str, Any]]:
        reqs = [GenRequest(key=rd.doc.key, prompt=build_prompt(rd.doc, rd.view, rd.prompt_variant), rundoc=rd,
                           gen=spec.gen, system_prompt=spec.system_prompt, image_loader=lambda rd=rd: [visual(rd)])
                for rd in spec.rundocs]
        self.backend.generate(reqs, spec.on_result)
        return []


class DirectRunner(Runner):
    def harness(self) -> DirectHarness:
        return DirectHarness(self.backend())


def run_baseline(model: str, family: str, data_dir: Path, results_dir: Path, *extra: str,
                 backend: Callable[..., Backend] | None = None) -> list:
    record = get_record(model)
    argv = ["--data_dir", str(data_dir), "--tasks_list_json_path",
            str(REPO / "tasks_list" / f"tasks_MedVision-Phantom-{family}.json"), "--results_dir", str(results_dir),
            "--skip_update_status", "--skip_env_setup", "--no_progress", *extra]
    cfg = build_config(build_parser(record, "medvision-bm run").parse_args(argv), record,
                       ["medvision-bm", "run", "--model", model, *argv])
    return DirectRunner(cfg, backend or build_backend).run()


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MedVision_")}
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    return env


def run_cli(*args: str, timeout: float = 300, module: str = "medvision_bm.cli") -> subprocess.CompletedProcess:
    """`medvision-bm ...` (or ``python -m module ...``) in a fresh interpreter, as a user runs it."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=cli_env(), capture_output=True,
                          text=True, timeout=timeout)
