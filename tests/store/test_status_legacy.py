"""Status files from upstream: a legacy ``{model: {task: true}}`` entry (upstream's ``update_task_status``, master
c221615 ``utils/utils.py``: written when lmms-eval exits 0, and a task is skipped when its key is present) whose task
has no answers in our results folder is not taken as done: one warning line, then the task is run, or imported from
``--upstream_results``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medvision_bm.data.layout import DataDir
from medvision_bm.data.planner import DatasetContract
from medvision_bm.io import iter_jsonl
from medvision_bm.store.status import LEGACY_ENTRY, StatusFile, results_hold_answers
from medvision_bm.tasks.scoring import format_answer, target
from mvtest_support import run_cli

pytestmark = pytest.mark.slow
TASK = "PhantomMR_TumorLesionSize_Task01_Coronal"
OTHER = "PhantomMR_TumorLesionSize_Task01_Axial"
UPSTREAM_NAME = "lingshu-32b"  # an upstream launcher's --model_name (UPSTREAM.md section 4)


def _setup(tmp_path: Path, model: str) -> tuple[Path, Path]:
    tl = tmp_path / "tasks_MedVision-TL.json"
    tl.write_text(json.dumps({TASK: 19, OTHER: 20}))
    status = tmp_path / "completed_tasks" / "completed_tasks_MedVision-TL.json"
    status.parent.mkdir()
    status.write_text(json.dumps({model: {TASK: True}}))  # what upstream's launcher leaves behind
    return tl, status


def _warnings(stderr: str, task: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(f"warning: {task}:")]


def test_legacy_done_entry_without_answers_warns_once_then_runs(tmp_path, phantom_dir):
    tl, status = _setup(tmp_path, "oracle")
    results = tmp_path / "Results"
    args = ["run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl),
            "--results_dir", str(results), "--task_status_json_path", str(status), "--skip_env_setup", "--no_progress"]
    assert StatusFile(status).is_done("oracle", TASK, "any") == (True, LEGACY_ENTRY)
    assert not results_hold_answers(results, "oracle", TASK)
    res = run_cli(*args)
    assert res.returncode == 0, res.stderr[-3000:]
    (warning,) = _warnings(res.stderr, TASK)
    assert "holds no answers" in warning and "running it" in warning and str(status) in warning
    assert not _warnings(res.stderr, OTHER)  # no legacy entry: no warning
    assert "already done" not in res.stderr
    (store_results,) = results.glob(f"oracle/{TASK}/*/results.json")
    r = json.loads(store_results.read_text())
    assert r["complete"] and r["metrics"]["SuccessRate"] == 1.0 and r["counts"]["asked_this_run"] == 19
    entry = StatusFile(status).read()["oracle"][TASK]
    assert isinstance(entry, dict) and entry["done"]  # the run's own entry replaced the legacy one

    # a legacy entry whose task has answers here is still done (skipped, no warning)
    status.write_text(json.dumps({"oracle": {TASK: True, OTHER: True}}))
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert not _warnings(again.stderr, TASK) and not _warnings(again.stderr, OTHER)
    assert again.stderr.count(f"already done for oracle ({LEGACY_ENTRY})") == 2


def _upstream_run(folder: Path, phantom_dir: Path) -> dict[str, str]:
    """An upstream lmms-eval samples file and results file for TASK (answers of the given per-doc texts)."""
    docs = DataDir(DatasetContract.resolve(phantom_dir)).samples(TASK).docs()
    texts = {d.key: format_answer([v * (1.1 if i % 2 else 0.9) for v in target(d)]) for i, d in enumerate(docs)}
    folder.mkdir(parents=True)
    lines = [json.dumps({"doc_id": i, "doc": d.upstream_row(phantom_dir), "target": str(target(d)),
                         "arguments": {}, "resps": [[texts[d.key]]], "filtered_resps": [texts[d.key]],
                         "doc_hash": "", "prompt_hash": "", "target_hash": "", "input": "... <answer> ..."})
             for i, d in enumerate(docs)]
    (folder / f"20250301_120000_samples_{TASK}.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "20250301_120000_results.json").write_text(json.dumps({
        "results": {TASK: {"alias": TASK}}, "configs": {TASK: {"generation_kwargs": {"max_new_tokens": 1024}}},
        "config": {"model": "vllm_lingshu", "model_args": "pretrained=lingshu-medical-mllm/Lingshu-32B"},
        "model_name_sanitized": "lingshu-medical-mllm__Lingshu-32B"}))
    return texts


def test_legacy_done_entry_without_answers_is_imported_from_upstream_results(tmp_path, phantom_dir):
    tl, status = _setup(tmp_path, UPSTREAM_NAME)
    upstream = tmp_path / "upstream" / "Results" / "MedVision-TL"
    texts = _upstream_run(upstream / UPSTREAM_NAME, phantom_dir)
    results = tmp_path / "Results"
    res = run_cli("run", "--model", "oracle", "--model_name", UPSTREAM_NAME, "--data_dir", str(phantom_dir),
                  "--tasks_list_json_path", str(tl), "--results_dir", str(results), "--task_status_json_path",
                  str(status), "--skip_env_setup", "--no_progress", "--upstream_results", str(upstream))
    assert res.returncode == 0, res.stderr[-3000:]
    (warning,) = _warnings(res.stderr, TASK)
    assert "holds no answers" in warning and f"imported {len(texts)} answer(s) from {upstream}" in warning
    assert f"{TASK}: already done for {UPSTREAM_NAME} (imported from upstream results); skipping" in res.stderr
    # the imported store holds upstream's answers, keyed to our docs; the oracle was asked nothing for TASK
    (store,) = [p.parent for p in results.glob(f"{UPSTREAM_NAME}/{TASK}/*/signature.json")]
    sig = json.loads((store / "signature.json").read_text())
    assert sig["inputs"]["imported"] == "upstream-lmms-eval" and sig["inputs"]["protocol"] == "current"
    assert {p.name for p in (store / "samples").iterdir()} == {"upstream-import.jsonl"}
    assert {r["key"]: r["text"] for r in iter_jsonl(store / "samples" / "upstream-import.jsonl")} == texts
    scored = json.loads((store / "results.json").read_text())
    assert scored["metrics"]["SuccessRate"] == 1.0 and scored["metrics"]["avgMRE"] == pytest.approx(0.1, rel=1e-3)
    assert StatusFile(status).read()[UPSTREAM_NAME][TASK] is True  # upstream's entry is left as upstream wrote it
    # the other task (no legacy entry) was run by the oracle as usual
    (other,) = results.glob(f"{UPSTREAM_NAME}/{OTHER}/*/results.json")
    assert json.loads(other.read_text())["complete"]
    # a second run finds the imported answers: skipped without a warning or a new import
    again = run_cli("run", "--model", "oracle", "--model_name", UPSTREAM_NAME, "--data_dir", str(phantom_dir),
                    "--tasks_list_json_path", str(tl), "--results_dir", str(results), "--task_status_json_path",
                    str(status), "--skip_env_setup", "--no_progress", "--upstream_results", str(upstream))
    assert again.returncode == 0, again.stderr[-3000:]
    assert not _warnings(again.stderr, TASK)
    assert f"{TASK}: already done for {UPSTREAM_NAME} ({LEGACY_ENTRY}); skipping" in again.stderr
