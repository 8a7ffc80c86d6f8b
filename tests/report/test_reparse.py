"""`medvision-bm parse` re-scores stored raw answers in place, and summaries follow the edit."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path

import pytest
from phantom_runs import run_cli

from medvision_bm.tasks.parse import PARSER_VERSION

TASK = "PhantomMR_BiometricsFromLandmarks_Task01_Axial"


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def store(root: Path, model: str) -> Path:
    return next(root.glob(f"MedVision-Phantom-AD/{model}/{TASK}/*/signature.json")).parent


def test_parse_reproduces_the_runners_scores(results_copy: Path) -> None:
    folder = store(results_copy, "mean")
    before = rows(folder / "parsed.jsonl")
    res = run_cli("parse", "--results_dir", str(results_copy))
    assert res.returncode == 0, res.stderr
    assert f"rewrote parsed.jsonl of 30 store(s) with parser {PARSER_VERSION}" in res.stdout
    after = rows(folder / "parsed.jsonl")
    assert [r.pop("parser_version") for r in after] == [PARSER_VERSION] * len(after)
    assert [r.pop("parser_version") for r in before] == [PARSER_VERSION] * len(before)  # the runner records it too
    assert after == before
    assert json.loads((folder / "results.json").read_text())["parser_version"] == PARSER_VERSION


def test_edited_raw_answer_changes_parsed_rows_and_summary(results_copy: Path, tmp_path: Path) -> None:
    folder = store(results_copy, "mean")
    docs = {r["key"]: r["doc"] for r in rows(folder / "docs.jsonl")}
    seg = next((folder / "samples").glob("*.jsonl"))
    recs = rows(seg)
    exact, garbled = recs[0]["key"], recs[1]["key"]
    truth = docs[exact]["annotation"]["value"]
    recs[0]["text"] = f"<think>about 3 mm?</think> The distance is <answer>{truth!r}</answer>"
    recs[1]["text"] = "I cannot measure this."
    time.sleep(0.01)
    seg.write_text("".join(json.dumps(r) + "\n" for r in recs))
    old = {r["key"]: r for r in rows(folder / "parsed.jsonl")}

    res = run_cli("parse", "--results_dir", str(results_copy / "MedVision-Phantom-AD"), "--models", "mean",
                  "--tasks", TASK)
    assert res.returncode == 0, res.stderr
    assert "changed=2" in res.stdout and "success 8 -> 7" in res.stdout
    new = {r["key"]: r for r in rows(folder / "parsed.jsonl")}
    assert new[exact]["values"] == [truth] and new[exact]["metrics"]["mae"] == 0.0
    assert old[exact]["metrics"]["mae"] > 0
    assert new[garbled]["status"] == "parse_failed" and new[garbled]["values"] is None
    assert all(new[k] == {**old[k], "parser_version": PARSER_VERSION} for k in new if k not in (exact, garbled))
    results = json.loads((folder / "results.json").read_text())
    assert results["metrics"]["n_success"] == 7 and results["metrics"]["n_parse_failed"] == 1
    assert results["metrics_at_run"]["n_success"] == 8

    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(results_copy / "MedVision-Phantom-AD"), "--output_dir", str(out),
                  "--no_plots", "--n_boot", "200")
    assert res.returncode == 0, res.stderr
    assert "re-scored in memory" not in res.stderr  # parse stored it
    with open(out / "tasks_AD.csv", newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["label"] == "mean" and r["task"] == TASK)
    expected = [v["metrics"]["mae"] for k, v in new.items() if v["success"]]
    assert row["n"] == "8" and row["n_parse_failed"] == "1"
    assert float(row["success_rate"]) == pytest.approx(7 / 8)
    assert float(row["mae"]) == pytest.approx(sum(expected) / 7)
    assert sum(expected) / 7 < sum(v["metrics"]["mae"] for v in old.values()) / 8


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
    assert "re-scored in memory" in res.stderr and "medvision-bm parse" in res.stderr
    assert (folder / "parsed.jsonl").read_bytes() == parsed_before
    with open(out / "tasks_AD.csv", newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["label"] == "oracle" and r["task"] == TASK)
    assert row["n_success"] == "7" and float(row["mae"]) == 0.0


def test_parse_outputs_entry_point_dry_run(results_copy: Path) -> None:
    folder = store(results_copy, "mean")
    before = (folder / "parsed.jsonl").read_bytes()
    res = run_cli("--results_dir", str(results_copy), "--dry_run", module="medvision_bm.benchmark.parse_outputs")
    assert res.returncode == 0, res.stderr
    assert "would rewrite parsed.jsonl of 30 store(s)" in res.stdout
    assert (folder / "parsed.jsonl").read_bytes() == before
