"""Helpers shared by tests in every folder (importable as `mvtest_support` through pytest's pythonpath)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `medvision-bm ...` in a fresh interpreter, as a user would."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MedVision_")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "medvision_bm.cli", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd or REPO, timeout=timeout)
