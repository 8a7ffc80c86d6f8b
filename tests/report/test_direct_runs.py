"""A baseline runs through the direct harness (no lmms-eval import); it writes the stores lmms-eval's task loop
writes: the same docs, answers, parsed rows and metrics, and the other tests' direct runs are the command's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from medvision_bm.models.registry import get_record
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.backends import build_backend
from medvision_bm.runner.config import build_config
from medvision_bm.runner.harness import LmmsHarness
from medvision_bm.runner.loop import Runner
from mvtest_support import REPO
from phantom_runs import RUN_ENV, cli_env, run_cli

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


def test_a_baseline_never_loads_lmms_eval_and_writes_what_lmms_evals_loop_writes(phantom_dir: Path,
                                                                                   tmp_path: Path) -> None:
    task = "PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal"
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({task: 8}))
    common = ["--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tasks), "--skip_update_status",
              "--skip_env_setup", "--no_progress"]
    probe = ("import sys; sys.argv = ['medvision-bm', 'run', '--model', 'random-box', *sys.argv[1:]]\n"
             "from medvision_bm.cli import main\nrc = main()\n"
             "print('LOADED', 'lmms_eval' in sys.modules, 'torch' in sys.modules)\nraise SystemExit(rc)")
    res = subprocess.run([sys.executable, "-c", probe, *common, "--results_dir", str(tmp_path / "direct")], cwd=REPO,
                         env=cli_env(RUN_ENV), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "LOADED False False" in res.stdout  # neither lmms-eval nor torch was imported
    rec = get_record("random-box")
    argv = [*common, "--results_dir", str(tmp_path / "lmms")]
    runner = Runner(build_config(build_parser(rec, "t").parse_args(argv), rec, argv), build_backend)
    runner.harness = lambda: LmmsHarness(runner.backend(), tmp_path / "work")  # type: ignore[method-assign]
    assert all(o.state == "done" for o in runner.run())
    direct, through_lmms = _store_files(tmp_path / "direct", "random-box"), _store_files(tmp_path / "lmms", "random-box")
    assert len(direct) == 4 and direct == through_lmms
