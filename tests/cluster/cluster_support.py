"""Helpers for the cluster tests: running `submit`, reading plan.json, checking one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from mvtest_support import REPO, run_cli

SLURM_LOCAL = REPO / "tests" / "cluster" / "slurm-local.sh"


def submit(*args: str | os.PathLike, env: dict[str, str] | None = None, timeout: float = 600
           ) -> subprocess.CompletedProcess:
    return run_cli("submit", *map(str, args), env=env, timeout=timeout)


def load_plan(submit_dir: Path) -> dict[str, Any]:
    return json.loads((submit_dir / "plan.json").read_text())


def jobs_by_name(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {j["name"]: j for j in plan["jobs"]}


def one_line_error(res: subprocess.CompletedProcess, *needles: str) -> str:
    """The command failed with exit 2 and exactly one stderr line holding every needle."""
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    assert len(lines) == 1, res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def store_segments(results_dir: Path, model_name: str) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """task -> segment file name -> its JSON records (every store folder of the model under results_dir)."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for seg in sorted((results_dir / model_name).glob("*/*/samples/*.jsonl")):
        task = seg.parents[2].name
        lines = [ln for ln in seg.read_text().splitlines() if ln.strip()]
        out.setdefault(task, {})[seg.name] = [json.loads(ln) for ln in lines]
    return out


def ok_keys(segments: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Every key with an ok record, once per record (duplicates stay visible)."""
    return [r["key"] for recs in segments.values() for r in recs if r.get("status") == "ok"]


def status_entries(status_file: Path) -> dict[str, dict[str, Any]]:
    return json.loads(status_file.read_text()) if status_file.is_file() else {}
