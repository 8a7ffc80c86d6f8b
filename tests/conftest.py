"""Shared fixtures: the phantom dataset generated once per test session, the phantom baselines run once on it (the
oracle, mean and random-box stores the report, parse and judge tests read), one full summary of them, and the
legacy stores (written by the suite before the upstream data layer and scoring) under fixtures/legacy_results."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mvtest_support import REPO, TEST_CONTRACT_ENV

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Upstream's loader needs an annotation pin: the tests read the phantom at the pin its bundled task lists are counted
# at (the launchers' default), whatever the caller's shell says, unless a test pins another itself.
for _name in ("MedVision_DATA_DIR", "MedVision_DISABLE_SAMPLE_FILTERING"):
    os.environ.pop(_name, None)
os.environ.update(TEST_CONTRACT_ENV)
# The environments the tests build live for minutes: they skip the bytecode compile that users' environments get
# (tests/envs/test_envs_unit.py holds the builder to compiling it by default).
os.environ.setdefault("MEDVISION_ENV_BYTECODE", "0")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def phantom_dir(tmp_path_factory) -> Path:
    from medvision_bm.data.phantom import make_phantom

    root = tmp_path_factory.mktemp("phantom")
    make_phantom(root)
    return root


@pytest.fixture(scope="session")
def phantom_lists(phantom_dir, tmp_path_factory) -> Path:
    """A folder of tasks_MedVision-Phantom-<family>.json counted from ``phantom_dir`` at the tests' pin."""
    from medvision_bm.data.phantom import phantom_task_counts, write_tasks_lists
    from medvision_bm.data.planner import ENV_ACK, ENV_PLANNER

    folder = tmp_path_factory.mktemp("tasks_list")
    write_tasks_lists(phantom_task_counts(phantom_dir, os.environ[ENV_PLANNER], os.environ.get(ENV_ACK, "")), folder)
    return folder


@pytest.fixture()
def clean_env(monkeypatch):
    """No dataset-contract variable leaks in from the caller's shell: only the tests' contract is set (a test of a
    missing pin deletes it on top)."""
    for name in ("MedVision_PLANNER_VERSION", "MedVision_ACK_RELEASE", "MedVision_DATA_DIR",
                 "MedVision_DISABLE_SAMPLE_FILTERING"):
        monkeypatch.delenv(name, raising=False)
    for name, value in TEST_CONTRACT_ENV.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


@pytest.fixture()
def temporary_metric():
    """``add(record, after=None)`` registers a metric record for one test, after the metric ``after`` in the
    registry's order (default: last); the registry is restored after the test."""
    from medvision_bm.tasks.metrics import METRICS

    saved = dict(METRICS)

    def add(record, after: str | None = None) -> None:
        items = list(METRICS.items())
        at = len(items) if after is None else [name for name, _ in items].index(after) + 1
        items.insert(at, (record.name, record))
        METRICS.clear()
        METRICS.update(items)

    yield add
    METRICS.clear()
    METRICS.update(saved)


BASELINE_MODELS = ("oracle", "mean", "random-box")
BASELINE_FAMILIES = ("detect", "TL", "AD")
LEGACY = Path(__file__).parent / "fixtures" / "legacy_results"


@pytest.fixture(scope="session")
def phantom_results(phantom_dir: Path, phantom_lists: Path, tmp_path_factory) -> Path:
    """Results/<task_tag>/<model>/<task>/<sig>/ of the oracle, mean and random-box baselines on the phantom."""
    # the runner's modules: imported by the tests that use these stores only
    from phantom_runs import run_baseline

    root = tmp_path_factory.mktemp("results")
    for model in BASELINE_MODELS:
        for fam in BASELINE_FAMILIES:
            outcomes = run_baseline(model, fam, phantom_dir, root / f"MedVision-Phantom-{fam}", lists=phantom_lists)
            assert all(o.state == "done" for o in outcomes), outcomes
    return root


@pytest.fixture(scope="session")
def report_dir(phantom_results: Path, phantom_dir: Path, tmp_path_factory) -> Path:
    """One full summarize (plots, slices, a paired comparison) of the phantom results."""
    from phantom_runs import run_cli

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
