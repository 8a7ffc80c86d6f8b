"""The direct-loop baseline runs the other tests use write the same stores as `medvision-bm run` through lmms-eval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phantom_runs import RUN_ENV, run_cli

pytestmark = pytest.mark.slow


def _store_files(root: Path, model: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for folder in sorted(p.parent for p in root.glob(f"{model}/*/*/signature.json")):
        rel = f"{folder.parent.name}/{folder.name}"
        out[f"{rel}/docs"] = [json.loads(x) for x in (folder / "docs.jsonl").read_text().splitlines()]
        out[f"{rel}/parsed"] = [json.loads(x) for x in (folder / "parsed.jsonl").read_text().splitlines()]
        out[f"{rel}/texts"] = sorted((r["key"], r["status"], r["text"]) for seg in (folder / "samples").glob("*.jsonl")
                                     for r in map(json.loads, seg.read_text().splitlines()))
        res = json.loads((folder / "results.json").read_text())
        out[f"{rel}/results"] = [{k: res[k] for k in ("metrics", "answer_signature", "run_signature", "complete")}]
    return out


def test_direct_runs_match_the_cli(phantom_results: Path, phantom_dir: Path, tmp_path: Path) -> None:
    task = "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal"
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({task: 8}))
    res = run_cli("run", "--model", "mean", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tasks),
                  "--results_dir", str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup", "--no_progress",
                  timeout=600, env=RUN_ENV)
    assert res.returncode == 0, res.stderr[-2000:]
    cli = _store_files(tmp_path / "res", "mean")
    direct = {k: v for k, v in _store_files(phantom_results / "MedVision-Phantom-AD", "mean").items()
              if k.startswith(task)}
    assert cli.keys() == direct.keys() and len(cli) == 4
    assert cli == direct
