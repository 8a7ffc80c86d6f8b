"""The entry points import with the standard library alone: an evaluation's entry module sets up (installs) its
environment before anything else runs (install method 2), and the launchers build environments with whatever
Python the machine has, so neither may need numpy or another third-party package at import time."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mvtest_support import REPO

THIRD_PARTY = ("numpy", "orjson", "nibabel", "PIL", "yaml", "scipy", "ijson", "isal", "tqdm", "polars", "torch")

ENTRY_MODULES = (
    "medvision_bm.cli",
    "medvision_bm.cli.run",
    "medvision_bm.benchmark.eval__qwen2_5_vl",
    "medvision_bm.benchmark.eval__openai",
    "medvision_bm.benchmark.install_medvision_ds",
    "medvision_bm.benchmark.install_vendored_lmms_eval",
    "medvision_bm.envs.setup",
    "medvision_bm.envs.builder",
    "medvision_bm.envs.core",
    "medvision_bm.envs.lock",
)


@pytest.mark.parametrize("module", ENTRY_MODULES)
def test_entry_module_imports_without_third_party_packages(module: str) -> None:
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            f"        if name.split('.')[0] in {THIRD_PARTY!r}:\n"
            "            raise ImportError('blocked ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            f"import {module}\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
