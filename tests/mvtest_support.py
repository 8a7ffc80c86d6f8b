"""Helpers shared by tests in every folder (importable as `mvtest_support` through pytest's pythonpath)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from medvision_bm.data.phantom import LAUNCHER_PIN

REPO = Path(__file__).resolve().parents[1]
#: The dataset contract of the tests (and of every CLI call unless it passes its own; an empty value unsets one):
#: the annotation pin the bundled phantom task lists are counted at, as the launchers export it.
TEST_CONTRACT_ENV: dict[str, str] = dict(LAUNCHER_PIN)


def phantom_list(folder: Path, family: str) -> dict[str, int]:
    """The phantom tasks list of ``family`` in ``folder`` (the ``phantom_lists`` fixture, or REPO/tasks_list)."""
    return json.loads((folder / f"tasks_MedVision-Phantom-{family}.json").read_text())


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `medvision-bm ...` in a fresh interpreter, as a user would (annotation pin: TEST_CONTRACT_ENV unless
    ``env`` sets one; an empty value leaves the variable unset)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MedVision_")}
    full_env.update(TEST_CONTRACT_ENV)
    full_env.update(env or {})
    full_env = {k: v for k, v in full_env.items() if not (k.startswith("MedVision_") and v == "")}
    return subprocess.run([sys.executable, "-m", "medvision_bm.cli", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd or REPO, timeout=timeout)
