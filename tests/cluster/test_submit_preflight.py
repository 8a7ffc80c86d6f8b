"""`medvision-bm submit --preflight`: an image-dependence check job before each model and family's evaluations,
which wait for it (afterok): a model whose answers ignore the image runs nothing more."""

from __future__ import annotations

import sys

import pytest
from cluster_support import jobs_by_name, load_plan, submit

from fakes.pixel_server import PixelStub, serve
from mvtest_support import run_cli

pytestmark = pytest.mark.slow


def _args(tmp_path, phantom_dir, phantom_lists, *extra):
    return ("--families", "detect", "--data_dir", phantom_dir, "--tasks_list_dir", phantom_lists,
            "--results_root", tmp_path / "res", "--status_dir", tmp_path / "st", "--python", sys.executable,
            "--submit_dir", tmp_path / "sub", *extra)


def test_the_evaluations_wait_for_the_preflight_and_a_flagged_model_runs_nothing(tmp_path, phantom_dir,
                                                                                 phantom_lists):
    res = submit("--models", "oracle", *_args(tmp_path, phantom_dir, phantom_lists, "--preflight", "2", "--local", "1",
                                              "--", "--sample_limit", "2"))
    assert res.returncode == 3, res.stdout[-3000:] + res.stderr[-3000:]
    jobs = jobs_by_name(load_plan(tmp_path / "sub"))
    pre, ev = jobs["preflight-oracle-detect"], jobs["eval-oracle-detect"]
    assert pre["kind"] == "preflight" and len(pre["tasks"]) == 1
    assert ["afterok", "preflight-oracle-detect"] in ev["depends"]
    script = (tmp_path / "sub" / "jobs" / "preflight-oracle-detect.sbatch").read_text()
    assert "--preflight 2 --preflight_only" in script
    log = next((tmp_path / "sub" / "logs").glob("preflight-oracle-detect*")).read_text()
    assert "ANSWERS DO NOT DEPEND ON THE IMAGE" in log and "stopped by the preflight" in log
    results = tmp_path / "res" / "MedVision-Phantom-detect"
    assert (results / ".check-vision" / "oracle" / pre["tasks"][0]).is_dir()
    assert not (results / "oracle").exists(), "no evaluation ran"
    assert not (tmp_path / "st" / "completed_tasks_MedVision-Phantom-detect.json").exists()
    shown = run_cli("status", str(tmp_path / "sub"))
    assert "preflight" in shown.stdout and "exit 4" in shown.stdout, shown.stdout


def test_a_model_that_answers_from_the_pixels_passes_the_preflight_and_runs(tmp_path, phantom_dir, phantom_lists):
    server = serve(PixelStub())
    try:
        res = submit("--models", "openai-compatible", "--model_flags",
                     f"openai-compatible=--base_url {server.url}/v1 --model_name served-x",
                     *_args(tmp_path, phantom_dir, phantom_lists, "--preflight", "3", "--local", "1", "--",
                            "--sample_limit", "1"))
    finally:
        server.stop()
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    log = next((tmp_path / "sub" / "logs").glob("preflight-openai-compatible-detect*")).read_text()
    assert "answers depend on the image" in log and "preflight passed" in log
    results = tmp_path / "res" / "MedVision-Phantom-detect"
    assert list((results / "served-x").glob("*/*/results.json")), "the evaluations ran after it"
