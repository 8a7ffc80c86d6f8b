"""The runner end to end: lmms-eval task loop, sample-level resume after SIGKILL, status file, signatures."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from medvision_bm.data.docs import rundoc_from_store_row
from medvision_bm.io import iter_jsonl
from medvision_bm.store.status import StatusFile
from medvision_bm.tasks.hooks import prompt
from mvtest_support import REPO, TEST_CONTRACT_ENV, phantom_list, run_cli

pytestmark = pytest.mark.slow
FAMILIES = ("detect", "TL", "AD")
#: Predictions are read as float32, as upstream does: a perfect detection answer's IoU is 1 up to that rounding.
IOU_TOL = 1e-6


def combined_tasks_list(tmp_path: Path, lists: Path, families=FAMILIES, tasks_per_family: int | None = None) -> Path:
    merged: dict[str, int] = {}
    for fam in families:
        items = phantom_list(lists, fam).items()
        merged.update(list(items)[:tasks_per_family])
    path = tmp_path / "tasks_mixed.json"
    path.write_text(json.dumps(merged))
    return path


def results_files(results: Path) -> list[Path]:
    return sorted(results.glob("*/*/*/results.json"))


def ok_records(store: Path) -> list[dict]:
    return [r for seg in sorted(store.glob("samples/*.jsonl")) for r in iter_jsonl(seg) if r.get("status") == "ok"]


def test_oracle_is_perfect_on_every_phantom_task_and_a_rerun_skips(tmp_path, phantom_dir, phantom_lists):
    tl = combined_tasks_list(tmp_path, phantom_lists)
    status = tmp_path / "completed_tasks" / "status.json"
    args = ["run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl),
            "--results_dir", str(tmp_path / "res"), "--task_status_json_path", str(status), "--skip_env_setup"]
    res = run_cli(*args)
    assert res.returncode == 0, res.stderr[-3000:]
    tasks = json.loads(tl.read_text())
    files = results_files(tmp_path / "res")
    assert len(files) == len(tasks)
    for f in files:
        r = json.loads(f.read_text())
        m = r["metrics"]
        assert r["complete"] and m["SuccessRate"] == 1.0 and m["n"] == m["num_samples"] == tasks[r["task"]]
        if r["family"] == "detect":
            for name in ("IoU", "F1", "Precision", "Recall"):
                assert m[name] >= 1 - IOU_TOL, (r["task"], name, m[name])
            assert m["Acc@IoU[0.50:0.95]"] == 1.0 and m["Acc@IoU>=0.95"] == 1.0
            assert 0 <= m["avgMAE"] < IOU_TOL
        else:
            assert m["avgMAE"] == 0.0 and m["avgMRE"] == 0.0
            assert m["avgNMAE"] in (0.0, None)  # A/D angles have no nMAE (upstream: distances only)
        assert r["versions"]["lmms-eval"] == "0.7.3"
        assert list((f.parent / "lmms_eval").glob("samples_*.jsonl")), "the harness's per-sample log is kept"
    done = StatusFile(status).read()["oracle"]
    assert set(done) == set(tasks) and all(e["done"] for e in done.values())
    segments = sorted(tmp_path.glob("res/*/*/*/samples/*.jsonl"))
    again = run_cli(*args)
    assert again.returncode == 0
    assert again.stderr.count("already done") == len(tasks)
    assert sorted(tmp_path.glob("res/*/*/*/samples/*.jsonl")) == segments  # nothing asked again


def _check_perfect(r: dict) -> None:
    m = r["metrics"]
    assert r["complete"] and m["SuccessRate"] == 1.0, (r["task"], m)
    if r["family"] == "detect":
        assert m["IoU"] >= 1 - IOU_TOL and m.get("Acc@IoU>=0.95", 1.0) == 1.0  # paper rules: no Acc@IoU
    elif r["task"].endswith("-CoT-scaledPS"):  # a scaled target is a float64 product; upstream reads answers as float32
        assert m["avgMAE"] == pytest.approx(0.0, abs=1e-5) and m["avgMRE"] == pytest.approx(0.0, abs=1e-6)
    else:
        assert m["avgMAE"] == 0.0 and m["avgMRE"] == 0.0


@pytest.mark.parametrize("protocol", ["current", "paper"])
def test_oracle_is_perfect_on_every_variant_and_protocol(tmp_path, phantom_dir, protocol):
    """Every task-name variant (current protocol) and the paper protocol's plain tasks, through lmms-eval; the
    prompt each sample was asked is upstream's for that variant (its first line) and is stored with the answer."""
    variants = (["", "-CoT", "-CoT-woInstruct", "-CoT-scaledPS", "-VP", "-VP-woMedImg", "-336x336"]
                if protocol == "current" else ["", "-560x560"])
    base = {"detect": "PhantomMR_BoxCoordinate_Task01_Sagittal", "TL": "PhantomCT_TumorLesionSize_Task02_Axial",
            "AD": "PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal"}
    tasks = {}
    for fam, name in base.items():
        for v in variants:
            if fam == "detect" and v in ("-CoT-woInstruct", "-CoT-scaledPS", "-VP-woMedImg"):
                continue  # upstream defines these for T/L and A/D only
            tasks[name + v] = 0
    tl = tmp_path / "variants.json"
    tl.write_text(json.dumps(tasks))
    res = run_cli("run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl),
                  "--results_dir", str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup",
                  "--protocol", protocol, "--sample_limit", "3")
    assert res.returncode == 0, res.stderr[-3000:]
    files = results_files(tmp_path / "res")
    assert {json.loads(f.read_text())["task"] for f in files} == set(tasks)
    sigs = set()
    for f in files:
        r = json.loads(f.read_text())
        _check_perfect(r)
        assert r["protocol"] == protocol and r["parser_version"] == ("strict-1" if protocol == "current" else "lastk-1")
        sigs.add(r["answer_signature"])
        rows = list(iter_jsonl(f.parent / "docs.jsonl"))
        assert rows and all(row["protocol"] == protocol and row["variant"] in r["task"] for row in rows)
        text = json.dumps([prompt(dataclasses.replace(rundoc_from_store_row(row), data_root=str(phantom_dir)))
                           for row in rows])
        assert text.startswith('["Task:')
        assert ("Given the input medical image" in text) != r["task"].endswith("-VP-woMedImg")
        assert ("Reasoning steps:" in text) == ("-CoT" in r["task"] and not r["task"].endswith("woInstruct"))
    assert len(sigs) == len(tasks)  # each variant is its own run


def test_mean_and_random_box_give_finite_nontrivial_errors(tmp_path, phantom_dir, phantom_lists):
    tl = combined_tasks_list(tmp_path, phantom_lists)
    for model in ("mean", "random-box"):
        res = run_cli("run", "--model", model, "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl),
                      "--results_dir", str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup",
                      "--sample_limit", "6")
        assert res.returncode == 0, res.stderr[-3000:]
    tasks = json.loads(tl.read_text())
    assert len(results_files(tmp_path / "res")) == 2 * len(tasks)
    for f in results_files(tmp_path / "res"):
        r = json.loads(f.read_text())
        m = r["metrics"]
        assert m["n"] == min(6, tasks[r["task"]]) and m["SuccessRate"] == 1.0
        assert 0 < m["avgMAE"] < 1e6
        if r["family"] == "detect":
            assert 0 <= m["IoU"] < 0.9


def _store_ok_count(results: Path) -> int:
    n = 0
    for seg in results.glob("*/*/*/samples/*.jsonl"):
        with open(seg, "rb") as fh:
            n += fh.read().count(b'"status":"ok"')
    return n


def _run_until(args: list[str], results: Path, kill_at: int | None, env: dict[str, str]) -> int:
    """Start a run; SIGKILL it once the store holds ``kill_at`` answers. Returns the exit code."""
    proc = subprocess.Popen([sys.executable, "-m", "medvision_bm.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, cwd=REPO, start_new_session=True)
    if kill_at is None:
        return proc.wait(timeout=600)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if _store_ok_count(results) >= kill_at:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    return proc.wait(timeout=60)


def test_sigkill_at_random_points_then_resume_matches_an_uninterrupted_run(tmp_path, phantom_dir, phantom_lists):
    tl = combined_tasks_list(tmp_path, phantom_lists, families=("TL", "AD"))
    total = sum(json.loads(tl.read_text()).values())
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MedVision_")}, **TEST_CONTRACT_ENV}

    def args(results: Path, status: Path) -> list[str]:
        return ["run", "--model", "oracle", "--pace_s", "0.03", "--data_dir", str(phantom_dir),
                "--tasks_list_json_path", str(tl), "--results_dir", str(results), "--task_status_json_path",
                str(status), "--skip_env_setup", "--no_progress"]

    ref = tmp_path / "ref"
    assert _run_until(args(ref, tmp_path / "ref_status.json"), ref, None, env) == 0

    res, status = tmp_path / "killed", tmp_path / "killed_status.json"
    kill_points = [3, 11, 19, 30, total - 4]
    for point in kill_points:
        rc = _run_until(args(res, status), res, point, env)
        assert rc == -signal.SIGKILL
    stored = _store_ok_count(res)
    assert kill_points[-1] <= stored < total
    # a torn last line, as a kill in the middle of a write leaves it, must be tolerated
    seg = next(res.glob("*/*/*/samples/*.jsonl"))
    with open(seg, "ab") as fh:
        fh.write(b'{"key": "torn", "status": "o')
    assert _run_until(args(res, status), res, None, env) == 0

    tasks = json.loads(tl.read_text())
    assert set(StatusFile(status).read()["oracle"]) == set(tasks)  # valid JSON, every task done
    for ref_file in results_files(ref):
        rel = ref_file.relative_to(ref)
        got = json.loads((res / rel).read_text())
        want = json.loads(ref_file.read_text())
        assert got["metrics"] == want["metrics"] and got["run_signature"] == want["run_signature"]
        assert (res / rel).with_name("parsed.jsonl").read_text() == ref_file.with_name("parsed.jsonl").read_text()
        oks = ok_records((res / rel).parent)
        keys = [r["key"] for r in oks]
        assert len(keys) == len(set(keys)) == want["counts"]["selected"], "a stored sample was answered twice"


def _mark_many(path: str, worker: int, n: int) -> None:
    sf = StatusFile(path)
    for i in range(n):
        sf.mark(f"model{worker % 2}", f"Task_{worker}_{i}", {"run_signature": f"s{worker}"})


def test_eight_processes_marking_one_status_file_lose_no_update(tmp_path):
    path = str(tmp_path / "completed_tasks_x.json")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_mark_many, args=(path, w, 25)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    data = StatusFile(path).read()
    assert sum(len(v) for v in data.values()) == 8 * 25


def test_the_older_status_shape_is_read(tmp_path, phantom_dir):
    status = tmp_path / "old.json"
    status.write_text(json.dumps({"oracle": {"PhantomMR_TumorLesionSize_Task01_Axial": True}}))
    sf = StatusFile(status)
    assert sf.is_done("oracle", "PhantomMR_TumorLesionSize_Task01_Axial", "any") == (True, "legacy entry (no signature)")
    assert sf.is_done("oracle", "PhantomMR_TumorLesionSize_Task01_Coronal", "any")[0] is False
    sf.mark("oracle", "PhantomMR_TumorLesionSize_Task01_Coronal", {"run_signature": "abc"})
    data = json.loads(status.read_text())
    assert data["oracle"]["PhantomMR_TumorLesionSize_Task01_Axial"] is True  # untouched
    assert sf.is_done("oracle", "PhantomMR_TumorLesionSize_Task01_Coronal", "abc") == (True, "done")
    assert sf.is_done("oracle", "PhantomMR_TumorLesionSize_Task01_Coronal", "other")[0] is False
