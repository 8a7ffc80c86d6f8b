"""Session fixtures for the report tests: the phantom baselines run once, one full summary of them, and the legacy
stores (written by the suite before the upstream data layer and scoring) under fixtures/legacy_results."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from phantom_runs import run_baseline, run_cli

MODELS = ("oracle", "mean", "random-box")
FAMILIES = ("detect", "TL", "AD")
LEGACY = Path(__file__).parent / "fixtures" / "legacy_results"


@pytest.fixture(scope="session")
def phantom_results(phantom_dir: Path, phantom_lists: Path, tmp_path_factory) -> Path:
    """Results/<task_tag>/<model>/<task>/<sig>/ of the oracle, mean and random-box baselines on the phantom."""
    root = tmp_path_factory.mktemp("results")
    for model in MODELS:
        for fam in FAMILIES:
            outcomes = run_baseline(model, fam, phantom_dir, root / f"MedVision-Phantom-{fam}", lists=phantom_lists)
            assert all(o.state == "done" for o in outcomes), outcomes
    return root


@pytest.fixture(scope="session")
def report_dir(phantom_results: Path, phantom_dir: Path, tmp_path_factory) -> Path:
    """One full summarize (plots, slices, a paired comparison) of the phantom results."""
    out = tmp_path_factory.mktemp("report") / "out"
    res = run_cli("summarize", "--results_dir", str(phantom_results), "--output_dir", str(out), "--data_dir",
                  str(phantom_dir), "--compare", "mean:oracle", "--n_boot", "400")
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture()
def results_copy(phantom_results: Path, tmp_path: Path) -> Path:
    """A private copy of the phantom results that a test may edit."""
    dst = tmp_path / "results"
    shutil.copytree(phantom_results, dst)
    return dst


@pytest.fixture()
def legacy_copy(tmp_path: Path) -> Path:
    """A private copy of the legacy stores (oracle and mean, one task per family, 3 samples each)."""
    dst = tmp_path / "legacy"
    shutil.copytree(LEGACY, dst)
    return dst
