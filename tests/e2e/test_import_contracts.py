"""The package's import contracts (pyproject.toml [tool.importlinter]) hold on the code as it is and break when a
module reaches a forbidden layer or closes a cycle between the modules of one package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mvtest_support import REPO

LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run([str(LINT), "--no-cache", "--config", str(root / "pyproject.toml")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    if not LINT.exists():
        pytest.skip("lint-imports is not installed beside this interpreter")
    shutil.copytree(REPO / "src" / "medvision_bm", tmp_path / "src" / "medvision_bm",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_contracts_hold_and_break_on_a_model_import_in_the_report_and_on_a_cycle(copy: Path) -> None:
    kept = _lint(copy)
    assert kept.returncode == 0, kept.stdout[-2000:]
    assert "0 broken" in kept.stdout and "No cycle between the modules of a package KEPT" in kept.stdout
    _append(copy / "src/medvision_bm/report/plots.py", "import medvision_bm.models.tiny  # noqa")
    _append(copy / "src/medvision_bm/report/cda.py", "from medvision_bm.report import cda_section  # noqa")
    broken = _lint(copy)
    assert broken.returncode != 0
    assert "The report reaches no backend, runner, judge or importer BROKEN" in broken.stdout
    assert "No cycle between the modules of a package BROKEN" in broken.stdout
