"""Paired comparison of two runs, and the family entry points over both results layouts."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from phantom_runs import run_cli


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_paired_comparison_in_the_report(report_dir: Path) -> None:
    tasks = {(r["label"], r["task"]): r for r in read_csv(report_dir / "tasks_TL.csv")}
    rows = [r for r in read_csv(report_dir / "compare_mean_vs_oracle.csv") if r["family"] == "TL"]
    mae = {r["task"]: r for r in rows if r["metric"] == "MAE"}
    assert set(mae) == {t for _, t in tasks} | {"ALL"}
    assert {r["unit"] for r in mae.values()} == {"mm"}
    for task, r in mae.items():
        if task == "ALL":
            continue
        mean_mae = float(tasks[("mean", task)]["avgMAE"])
        assert int(r["n_pairs"]) == int(tasks[("mean", task)]["num_samples"])
        assert float(r["mean_a"]) == pytest.approx(mean_mae) and float(r["mean_b"]) == 0.0
        assert float(r["diff"]) == pytest.approx(-mean_mae)  # b - a: oracle minus mean
        assert float(r["diff_lo"]) <= -mean_mae <= float(r["diff_hi"]) < 0
        assert r["better"] == "oracle" and float(r["p_boot"]) < 0.05
    per_task = [float(t["avgMAE"]) for (label, _), t in tasks.items() if label == "mean"]
    assert float(mae["ALL"]["diff"]) == pytest.approx(-sum(per_task) / len(per_task))  # the mean over tasks
    success = [r for r in rows if r["metric"] == "SuccessRate"]
    assert success and all(float(r["diff"]) == 0.0 and r["better"] == "no clear difference" for r in success)
    # A/D: distances and angles are compared apart, never averaged together
    ad = [r for r in read_csv(report_dir / "compare_mean_vs_oracle.csv") if r["family"] == "AD"]
    assert {r["task"] for r in ad if r["task"].startswith("ALL")} == {"ALL (distance)", "ALL (angle)"}
    assert {r["unit"] for r in ad if r["metric"] == "MAE"} == {"mm", "degrees"}


def test_a_p_value_of_zero_reads_as_below_the_resolution(report_dir: Path) -> None:
    """`p (bootstrap) 0` claimed certainty; no replicate on the other side of zero out of --n_boot 400
    (the report_dir fixture's) means p < 1/400."""
    csv_rows = read_csv(report_dir / "compare_mean_vs_oracle.csv")
    assert any(float(r["p_boot"]) == 0.0 for r in csv_rows if r["p_boot"])  # the CSV keeps the number
    md = (report_dir / "compare_mean_vs_oracle.md").read_text()
    cells = [line.split("|")[-3].strip() for line in md.splitlines() if line.startswith("| ") and "---" not in line]
    assert "&lt; 0.0025" in cells and "0" not in cells  # Markdown's escape of "< 0.0025" (views.md_cell)


def test_compare_command(phantom_results: Path, tmp_path: Path) -> None:
    res = run_cli("compare", "--results_dir", str(phantom_results), "--a", "random-box", "--b", "mean",
                  "--families", "detect", "--metrics", "iou,MAE", "--output_dir", str(tmp_path), "--n_boot", "300")
    assert res.returncode == 0, res.stderr
    assert re.search(r"^detect +ALL +IoU +unitless ", res.stdout, re.M) and "Paired comparison: mean vs random-box" \
        in res.stdout
    data = json.loads((tmp_path / "compare_random-box_vs_mean.json").read_text())
    assert {r["metric"] for r in data["rows"]} == {"SuccessRate", "IoU", "MAE"}
    assert {r["unit"] for r in data["rows"] if r["metric"] == "MAE"} == {"relative"}
    assert {r["family"] for r in data["rows"]} == {"detect"}
    overall = next(r for r in data["rows"] if r["task"] == "ALL" and r["metric"] == "IoU")
    assert overall["diff"] > 0 and overall["diff_lo"] > 0 and overall["better"] == "mean"
    assert (tmp_path / "compare_random-box_vs_mean.csv").is_file()
    assert (tmp_path / "compare_random-box_vs_mean.md").read_text().startswith("### Paired comparison")
    bad = run_cli("compare", "--results_dir", str(phantom_results), "--a", "mean", "--b", "oracle", "--metrics", "mae_major")
    assert bad.returncode == 2 and "--metrics 'mae_major' is not a metric" in bad.stderr


@pytest.mark.parametrize(("module", "family"), [("summarize_detection_task", "detect"), ("summarize_TL_task", "TL"),
                                                ("summarize_AD_task", "AD")])
def test_family_entry_points(phantom_results: Path, tmp_path: Path, module: str, family: str) -> None:
    # a single task-tag folder as the results dir
    res = run_cli("--results_dir", str(phantom_results / f"MedVision-Phantom-{family}"), "--output_dir",
                  str(tmp_path), "--no_plots", "--n_boot", "200", "--browse_per_task", "1",
                  module=f"medvision_bm.benchmark.{module}")
    assert res.returncode == 0, res.stderr
    written = {p.name for p in tmp_path.iterdir()}
    assert {"index.html", f"leaderboard_{family}.csv", f"tasks_{family}.md", "summary.json", "runs.csv"} <= written
    assert not {f"leaderboard_{f}.csv" for f in ("detect", "TL", "AD") if f != family} & written
    assert "1. oracle (current, strict-1" in res.stdout
    # the root holding all three task tags, restricted to this family, gives the same table
    res = run_cli("summarize", "--results_dir", str(phantom_results), "--output_dir", str(tmp_path / "all"),
                  "--families", family, "--no_plots", "--n_boot", "200", "--browse_per_task", "1")
    assert res.returncode == 0, res.stderr
    assert read_csv(tmp_path / f"tasks_{family}.csv") == read_csv(tmp_path / "all" / f"tasks_{family}.csv")


def test_compare_prints_plain_text_and_names_no_file_it_does_not_write(phantom_results: Path, tmp_path: Path,
                                                                         phantom_dir: Path) -> None:
    """On a terminal a p below the resolution reads ``< 0.0025``, not Markdown's ``&lt; 0.0025``; the T/L filter's
    note names no tl_filter.csv (a summary's file, which compare never writes)."""
    res = run_cli("compare", "--results_dir", str(phantom_results), "--a", "mean", "--b", "oracle", "--families",
                  "TL", "--n_boot", "400", "--data_dir", str(phantom_dir), "--output_dir", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "< 0.0025" in res.stdout and "&lt;" not in res.stdout and "&amp;" not in res.stdout
    assert "removed-samples filter" in res.stderr and "tl_filter.csv" not in res.stderr
    assert not list(tmp_path.rglob("tl_filter*"))
    assert "&lt; 0.0025" in (tmp_path / "compare_mean_vs_oracle.md").read_text()  # the Markdown file stays Markdown
