"""A metric registered in one record (with its function) reaches parse's rows, summarize's tables and JSON, compare
and the HTML report, with no other file touched, and leaves every other metric's value as it was."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from medvision_bm.cli.compare import compare_main
from medvision_bm.cli.parse import parse_main
from medvision_bm.cli.summarize import summarize_main
from medvision_bm.tasks.families import SAMPLE_METRICS
from medvision_bm.tasks.metrics import MetricSpec, SampleContext


def max_abs_error(c: SampleContext) -> float | None:
    """The largest absolute difference between an answer's numbers and the target (none for a failure)."""
    if c.values is None:
        return None
    return max(abs(v - t) for v, t in zip(c.values, c.target))


MAXAE = MetricSpec("MaxAE", "error", False, ("TL",), max_abs_error)


def _rows(results: Path) -> dict[tuple[str, str, str], dict]:
    """(model, task, key) -> parsed row of every T/L store."""
    out = {}
    for path in sorted(results.rglob("parsed.jsonl")):
        _tag, model, task = path.relative_to(results).parts[:3]
        if "-TL" not in _tag:
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line)
            out[(model, task, row["key"])] = row
    return out


def test_a_metric_in_a_temporary_record_reaches_parse_summarize_compare_and_the_report(
        results_copy: Path, tmp_path: Path, temporary_metric, capsys: pytest.CaptureFixture[str]) -> None:
    before = _rows(results_copy)
    assert before and all("MaxAE" not in r["metrics"] for r in before.values())
    temporary_metric(MAXAE, after="MAE")  # inserted between MAE and MRE: their columns are found by name

    # parse: every row carries it, computed from the row's own answer and target; the other metrics are unchanged
    assert parse_main(["--results_dir", str(results_copy), "--families", "TL", "--force"]) == 0
    after = _rows(results_copy)
    assert after.keys() == before.keys()
    for k, row in after.items():
        assert set(row["metrics"]) == {"MAE", "MaxAE", "MRE", "nMAE"}
        assert {m: v for m, v in row["metrics"].items() if m != "MaxAE"} == before[k]["metrics"]
        if row["success"]:
            expected = max(abs(v - t) for v, t in zip(row["values"], row["target"]))
            assert row["metrics"]["MaxAE"] == pytest.approx(expected, abs=1e-9)
        else:
            assert row["metrics"]["MaxAE"] is None
    assert any(r["success"] for r in after.values()) and any(r["metrics"]["MaxAE"] for r in after.values())

    # summarize: a column of the task table (the mean over the task's scored successes), the leaderboard, the JSON
    out = tmp_path / "report"
    assert summarize_main(["--results_dir", str(results_copy), "--output_dir", str(out), "--families", "TL",
                           "--n_boot", "100", "--no_plots", "--no_tl_filter"]) == 0  # every row counts
    with (out / "tasks_TL.csv").open() as fh:
        tasks = list(csv.DictReader(fh))
    checked = 0
    for r in tasks:
        model = r["label"].split("@")[0]
        mine = [row["metrics"]["MaxAE"] for (m, task, _), row in after.items()
                if m == model and task == r["task"] and row["success"] and not row["near_zero_gt"]]
        if mine:
            assert float(r["MaxAE"]) == pytest.approx(sum(mine) / len(mine), rel=1e-9)
            assert r["MaxAE_lo"] and r["MaxAE_hi"]
            checked += 1
    assert checked >= 2
    summary = json.loads((out / "summary.json").read_text())
    board = {r["label"].split("@")[0]: r for r in summary["families"]["TL"]["leaderboard"]}
    assert board["oracle"]["MaxAE"] == pytest.approx(0.0, abs=1e-3)
    assert board["mean"]["MaxAE"] > 0.01
    assert board["mean"]["MaxAE"] >= board["mean"]["avgMAE"]  # the largest axis error is at least their mean
    for run in summary["families"]["TL"]["upstream"].values():
        assert "MaxAE" not in run["overall"]  # upstream's overall row keeps upstream's keys
    assert "MaxAE (mm)" in (out / "index.html").read_text()  # an error metric: the family's unit in its header

    # compare: a metric with a direction (lower is better: the oracle wins over the mean baseline)
    capsys.readouterr()
    assert compare_main(["--results_dir", str(results_copy), "--a", "mean", "--b", "oracle", "--families", "TL",
                         "--metrics", "maxae", "--n_boot", "100"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "MaxAE" in ln and "ALL" in ln]
    assert lines and all(ln.rstrip().endswith("oracle") for ln in lines)


def test_the_temporary_record_is_gone_after_its_test() -> None:
    assert SAMPLE_METRICS["TL"] == ("MAE", "MRE", "nMAE")
