"""Shared fixtures: the phantom dataset generated once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mvtest_support import REPO

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def phantom_dir(tmp_path_factory) -> Path:
    from medvision_bm.data.phantom import make_phantom

    root = tmp_path_factory.mktemp("phantom")
    make_phantom(root)
    return root


@pytest.fixture()
def clean_env(monkeypatch):
    """No dataset-contract variables leak in from the caller's shell."""
    for name in ("MedVision_PLANNER_VERSION", "MedVision_ACK_RELEASE", "MedVision_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch
