"""Metric records: aggregation finds a metric column by its name, and an unknown metric has no direction."""

from __future__ import annotations

import dataclasses
import math

import pytest

from medvision_bm.errors import UserError
from medvision_bm.report.compare import _better
from medvision_bm.tasks import scoring
from medvision_bm.tasks.metrics import METRICS, MetricSpec

DETECT_ROWS = [
    {"status": "ok", "success": True, "near_zero_gt": False,
     "metrics": {"IoU": 0.5, "F1": 0.6, "Precision": 0.7, "Recall": 0.8, "MAE": 0.1}},
    {"status": "ok", "success": True, "near_zero_gt": False,
     "metrics": {"IoU": 0.3, "F1": 0.2, "Precision": 0.9, "Recall": 0.4, "MAE": 0.3}},
    {"status": "parse_failed", "success": False, "near_zero_gt": False, "metrics": {}},
]
TL_ROWS = [
    {"status": "ok", "success": True, "near_zero_gt": False, "metrics": {"MAE": 2.0, "MRE": 0.2, "nMAE": 0.1}},
    {"status": "ok", "success": True, "near_zero_gt": False, "metrics": {"MAE": 4.0, "MRE": 0.4, "nMAE": None}},
]


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)) or x == y
        for x, y in ((a[k], b[k]) for k in a))


@pytest.mark.parametrize("family,rows,after", [("detect", DETECT_ROWS, "IoU"), ("TL", TL_ROWS, "MAE")])
@pytest.mark.parametrize("rules", ["paper", "newer"])
def test_inserting_a_metric_in_a_family_list_changes_no_other_value(temporary_metric, family, rows, after, rules):
    before = scoring.aggregate_rows(family, rows, rules)
    assert before["n_success"] == 2
    temporary_metric(MetricSpec("Dice", "unitless", True, (family,), lambda c: 0.99), after=after)
    names = scoring.SAMPLE_METRICS[family]
    assert names.index("Dice") == names.index(after) + 1 and names.index("Dice") < len(names) - 1
    extended = [{**r, "metrics": {**r["metrics"], "Dice": 0.99}} for r in rows]
    assert _same(scoring.aggregate_rows(family, extended, rules), before)


def test_detection_task_metrics_are_the_means_of_their_named_columns():
    out = scoring.aggregate_rows("detect", DETECT_ROWS, "paper")
    assert out["avgMAE"] == pytest.approx(0.2)  # MAE's mean, not Recall's (0.6)
    assert out["F1"] is not None


def test_an_unknown_metric_has_no_direction_in_compare():
    with pytest.raises(UserError, match="HD95"):
        _better("HD95", 0.1, 0.2, "a", "b")


def test_every_metric_direction_comes_from_its_record(monkeypatch):
    assert _better("MAE", 0.1, 0.2, "a", "b") == "a"  # b's error is larger
    assert _better("IoU", 0.1, 0.2, "a", "b") == "b"
    monkeypatch.setitem(METRICS, "IoU", dataclasses.replace(METRICS["IoU"], higher_is_better=False))
    assert _better("IoU", 0.1, 0.2, "a", "b") == "a"


def test_the_units_line_and_the_families_follow_the_records(monkeypatch: pytest.MonkeyPatch) -> None:
    from medvision_bm.tasks import metrics as records

    assert records.unitless_text() == "IoU, F1, Precision, Recall, MRE, nMAE and every rate are unitless"
    monkeypatch.setitem(records.METRICS, "nMAE", dataclasses.replace(records.METRICS["nMAE"], unit="error"))
    assert records.unitless_text().endswith("Recall, MRE and every rate are unitless")
    assert "nMAE" in records.error_names() and "avgNMAE" in records.error_names()
    with pytest.raises(KeyError, match="unknown metric 'HD95'"):
        records.metric_spec("HD95")


def test_a_family_over_the_score_index_width_is_a_named_error(temporary_metric) -> None:
    from types import SimpleNamespace

    import numpy as np

    from medvision_bm.score.follow import METRIC_COLUMNS, ROW, fill_row

    row = SimpleNamespace(status="ok", success=True, near_zero_gt=False,
                          metrics={"IoU": 0.5, "F1": 0.6, "Precision": 0.7, "Recall": 0.8, "MAE": 0.1, "Dice": 0.9})
    rows = np.zeros(1, dtype=ROW)
    fill_row(rows, 0, "detect", row, None)  # type: ignore[arg-type]
    assert list(rows[0]["metrics"]) == [0.5, 0.6, 0.7, 0.8, 0.1] and METRIC_COLUMNS == 5
    temporary_metric(MetricSpec("Dice", "unitless", True, ("detect",), lambda c: 0.9))
    with pytest.raises(ValueError, match="detect family has 6 metric records; the score index holds 5"):
        fill_row(rows, 0, "detect", row, None)  # type: ignore[arg-type]
