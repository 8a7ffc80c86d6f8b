"""`medvision-bm parse` re-scores stored raw answers in place (with the protocol's parser or --parser), summaries
follow the edit, and stores written before the upstream data layer are re-scored and marked as legacy stores."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path

import pytest

from phantom_runs import run_cli

TASK = "PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal"


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def store(root: Path, model: str, task: str = TASK) -> Path:
    return next(root.glob(f"*/{model}/{task}/*/signature.json")).parent


def edit_answers(folder: Path, texts: dict[int, str]) -> list[str]:
    """Replace the raw answers of the segment's records at these positions; returns their keys."""
    seg = next((folder / "samples").glob("*.jsonl"))
    lines = [x for x in seg.read_bytes().splitlines() if x.strip()]
    keys = []
    for i, text in texts.items():  # the other lines keep their bytes: only these answers changed
        rec = json.loads(lines[i])
        rec["text"] = text
        lines[i] = json.dumps(rec).encode()
        keys.append(rec["key"])
    time.sleep(0.01)
    seg.write_bytes(b"".join(x + b"\n" for x in lines))
    return keys


def test_parse_reproduces_the_runners_scores(results_copy: Path) -> None:
    folder = store(results_copy, "mean")
    before = rows(folder / "parsed.jsonl")
    n_stores = len(list(results_copy.glob("*/*/*/*/signature.json")))
    res = run_cli("parse", "--results_dir", str(results_copy))
    assert res.returncode == 0, res.stderr
    assert f"rewrote parsed.jsonl of {n_stores} store(s) with parser strict-1" in res.stdout
    after = rows(folder / "parsed.jsonl")
    assert after == before  # the runner and parse score through the same code path
    assert {r["parser"] for r in after} == {"strict-1"} and {r["rules"] for r in after} == {"newer"}
    results = json.loads((folder / "results.json").read_text())
    assert (results["parser_version"], results["metric_rules"], results["protocol"]) == ("strict-1", "newer", "current")
    assert results["metrics"] == results["metrics_at_run"]


def test_edited_raw_answer_changes_parsed_rows_and_summary(results_copy: Path, tmp_path: Path) -> None:
    folder = store(results_copy, "mean")
    docs = {r["key"]: r["doc"] for r in rows(folder / "docs.jsonl")}
    first = rows(next((folder / "samples").glob("*.jsonl")))[0]["key"]
    truth = docs[first]["biometric_profile"]["metric_value"]
    exact, garbled = edit_answers(folder, {0: f"<think>about 3 mm?</think> The distance is <answer>{truth!r}</answer>",
                                           1: "I cannot measure this."})
    old = {r["key"]: r for r in rows(folder / "parsed.jsonl")}
    n = len(old)

    res = run_cli("parse", "--results_dir", str(results_copy / "MedVision-Phantom-AD"), "--models", "mean",
                  "--tasks", TASK)
    assert res.returncode == 0, res.stderr
    assert "changed=2  rescored=2" in res.stdout and f"success {n} -> {n - 1}" in res.stdout  # those two only
    new = {r["key"]: r for r in rows(folder / "parsed.jsonl")}
    assert new[exact]["values"] == [truth] and new[exact]["metrics"]["MAE"] == 0.0
    assert old[exact]["metrics"]["MAE"] > 0
    assert new[garbled]["status"] == "parse_failed" and new[garbled]["values"] is None
    assert new[garbled]["metrics"] == {"MAE": None, "MRE": None, "nMAE": None}
    assert all(new[k] == old[k] for k in new if k not in (exact, garbled))
    results = json.loads((folder / "results.json").read_text())
    assert results["metrics"]["n_success"] == n - 1 and results["metrics"]["n_parse_failed"] == 1
    assert results["metrics_at_run"]["n_success"] == n

    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(results_copy / "MedVision-Phantom-AD"), "--output_dir", str(out),
                  "--no_plots", "--n_boot", "200")
    assert res.returncode == 0, res.stderr
    assert "re-scored in memory" not in res.stderr  # parse stored it
    row = next(r for r in read_csv(out / "tasks_AD.csv") if r["label"] == "mean" and r["task"] == TASK)
    expected = [v["metrics"]["MAE"] for v in new.values() if v["success"]]
    assert row["num_samples"] == str(n) and row["n_parse_failed"] == "1"
    assert float(row["SuccessRate"]) == pytest.approx((n - 1) / n)
    assert float(row["avgMAE"]) == pytest.approx(sum(expected) / (n - 1))
    assert float(row["avgMAE"]) == pytest.approx(results["metrics"]["avgMAE"])  # results.json's own number


def test_parse_scores_again_only_what_changed_unless_forced_and_writes_the_same_rows(results_copy: Path) -> None:
    """`parse` follows the answers as a run's resume does: nothing changed, nothing is scored again; one edited
    answer, that one; --force, every sample; the rows are the same either way."""
    folder = store(results_copy, "mean")
    args = ("parse", "--results_dir", str(results_copy / "MedVision-Phantom-AD"), "--models", "mean", "--tasks", TASK)
    res = run_cli(*args)
    assert res.returncode == 0 and "changed=0  rescored=0" in res.stdout, res.stdout + res.stderr
    before = (folder / "parsed.jsonl").read_bytes()
    n = len(rows(folder / "parsed.jsonl"))
    edit_answers(folder, {3: "I cannot measure this."})
    res = run_cli(*args)
    assert res.returncode == 0 and "changed=1  rescored=1" in res.stdout, res.stdout + res.stderr
    followed = (folder / "parsed.jsonl").read_bytes()
    assert followed != before
    res = run_cli(*args, "--force")
    assert res.returncode == 0 and f"changed=0  rescored={n}" in res.stdout, res.stdout + res.stderr
    assert (folder / "parsed.jsonl").read_bytes() == followed


def test_parser_override_and_an_overflowing_answer(results_copy: Path, tmp_path: Path) -> None:
    folder = store(results_copy, "mean")
    untagged, huge = edit_answers(folder, {0: "The distance is about 12.5 mm.", 1: "<answer>1e39</answer>"})
    ad = str(results_copy / "MedVision-Phantom-AD")
    assert run_cli("parse", "--results_dir", ad, "--models", "mean", "--tasks", TASK).returncode == 0
    strict = {r["key"]: r for r in rows(folder / "parsed.jsonl")}
    # strict-1: no <answer> block is a failure; 1e39 overflows float32: a success whose MAE is left out (None)
    assert strict[untagged]["status"] == "parse_failed"
    assert strict[huge]["status"] == "ok" and strict[huge]["metrics"]["MAE"] is None
    res = run_cli("parse", "--results_dir", ad, "--models", "mean", "--tasks", TASK, "--parser", "lastk-1")
    assert res.returncode == 0, res.stderr
    assert "with parser lastk-1" in res.stdout
    last = {r["key"]: r for r in rows(folder / "parsed.jsonl")}
    assert last[untagged]["status"] == "ok" and last[untagged]["values"] == [12.5]
    assert {r["parser"] for r in last.values()} == {"lastk-1"} and {r["rules"] for r in last.values()} == {"newer"}
    assert last[huge]["values"] == [39.0]  # the paper-era regex reads "1" and "39", the last one counts
    results = json.loads((folder / "results.json").read_text())
    assert (results["parser_version"], results["metric_rules"]) == ("lastk-1", "newer")
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", ad, "--output_dir", str(out), "--no_plots", "--n_boot", "200")
    assert res.returncode == 0, res.stderr
    board = {(r["label"], r["aggregate"]): r for r in read_csv(out / "leaderboard_AD.csv")}
    # the parsers of the rows, per run: one of the mean run's two tasks was re-parsed with lastk-1
    assert board[("mean", "Distance")]["parser"] == "lastk-1,strict-1"
    assert board[("oracle", "Distance")]["parser"] == "strict-1"
    tasks = {(r["label"], r["task"]): r for r in read_csv(out / "tasks_AD.csv")}
    assert tasks[("mean", TASK)]["parser"] == "lastk-1"


def test_summarize_rescores_stale_stores_without_writing(results_copy: Path, tmp_path: Path) -> None:
    folder = store(results_copy, "oracle")
    seg = next((folder / "samples").glob("*.jsonl"))
    recs = rows(seg)
    recs[0]["text"] = "no numbers at all"
    parsed_before = (folder / "parsed.jsonl").read_bytes()
    seg.write_text("".join(json.dumps(r) + "\n" for r in recs))
    stamp = (folder / "parsed.jsonl").stat().st_mtime
    os.utime(seg, (stamp + 5, stamp + 5))
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(results_copy / "MedVision-Phantom-AD"), "--output_dir", str(out),
                  "--no_plots", "--n_boot", "200")
    assert res.returncode == 0, res.stderr
    assert "scored in memory" in res.stderr and "medvision-bm parse" in res.stderr
    assert (folder / "parsed.jsonl").read_bytes() == parsed_before
    row = next(r for r in read_csv(out / "tasks_AD.csv") if r["label"] == "oracle" and r["task"] == TASK)
    assert row["n_success"] == str(len(recs) - 1) and float(row["avgMAE"]) == 0.0


def test_parse_outputs_entry_point_dry_run(results_copy: Path) -> None:
    folder = store(results_copy, "mean")
    before = (folder / "parsed.jsonl").read_bytes()
    n_stores = len(list(results_copy.glob("*/*/*/*/signature.json")))
    res = run_cli("--results_dir", str(results_copy), "--dry_run", module="medvision_bm.benchmark.parse_outputs")
    assert res.returncode == 0, res.stderr
    assert f"would rewrite parsed.jsonl of {n_stores} store(s)" in res.stdout
    assert (folder / "parsed.jsonl").read_bytes() == before


# ------------------------------------------------------------------------------------- legacy stores


def test_legacy_stores_are_rescored_in_memory_then_by_parse(legacy_copy: Path, tmp_path: Path) -> None:
    """Stores of the suite before the upstream data layer (old docs.jsonl schema, parser parse-1, old metric names):
    summarize re-scores them in memory; parse rewrites them and marks them as legacy stores."""
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(legacy_copy), "--output_dir", str(out), "--no_plots",
                  "--n_boot", "200")
    assert res.returncode == 0, res.stderr
    assert "written before the upstream data layer" in res.stderr and "medvision-bm parse" in res.stderr
    runs = read_csv(out / "runs.csv")
    assert len(runs) == 6 and {r["source"] for r in runs} == {"re-scored in memory (legacy store)"}
    assert {r["protocol"] for r in runs} == {"current"} and {r["legacy"] for r in runs} == {"true"}
    oracle = {r["task"]: r for r in read_csv(out / "tasks_detect.csv") if r["label"] == "oracle"}
    (row,) = oracle.values()
    assert float(row["IoU"]) == pytest.approx(1.0, abs=1e-6) and float(row["SuccessRate"]) == 1.0
    mean_tl = next(r for r in read_csv(out / "tasks_TL.csv") if r["label"] == "mean")
    # the old store's own MAE of the same answers (its parsed.jsonl) is upstream's MAE up to float32 rounding
    old = rows(next(legacy_copy.glob("mean/*TumorLesionSize*/*/parsed.jsonl")))
    assert float(mean_tl["avgMAE"]) == pytest.approx(sum(r["metrics"]["mae"] for r in old) / len(old), rel=1e-5)
    groups = {r["group"] for r in read_csv(out / "groups_TL.csv")}
    assert groups == {"liver tumor @ CT (A)"}

    res = run_cli("parse", "--results_dir", str(legacy_copy))
    assert res.returncode == 0, res.stderr
    assert "rewrote parsed.jsonl of 6 store(s) with parser strict-1; 6 legacy store(s) re-scored" in res.stdout
    folder = next(legacy_copy.glob("oracle/*BoxCoordinate*/*/signature.json")).parent
    results = json.loads((folder / "results.json").read_text())
    assert results["legacy_store"] is True and "legacy" in results["legacy_note"]
    assert (results["parser_version"], results["parser_version_at_run"]) == ("strict-1", "parse-1")
    assert "iou" in results["metrics_at_run"] and results["metrics"]["IoU"] == pytest.approx(1.0, abs=1e-6)
    parsed = rows(folder / "parsed.jsonl")
    assert {r["rules"] for r in parsed} == {"newer"} and set(parsed[0]["metrics"]) == {"IoU", "F1", "Precision",
                                                                                       "Recall", "MAE"}
    out2 = tmp_path / "out2"
    res = run_cli("summarize", "--results_dir", str(legacy_copy), "--output_dir", str(out2), "--no_plots",
                  "--n_boot", "200")
    assert res.returncode == 0, res.stderr
    assert "re-scored in memory" not in res.stderr
    runs = read_csv(out2 / "runs.csv")
    assert {r["source"] for r in runs} == {"parsed.jsonl"} and {r["legacy"] for r in runs} == {"true"}
    assert read_csv(out2 / "tasks_TL.csv") == read_csv(out / "tasks_TL.csv")
