"""A statistic's cells built from a table's columns (report.views.ci_texts) read as the row rule
(``with_ci``) writes each: value and interval, or the value alone, marked where it rests on one sample."""

from __future__ import annotations

import math

import polars as pl

from medvision_bm.report.views import ONE_SAMPLE, ci_texts, with_ci


def test_column_cells_equal_the_row_rule_over_every_case() -> None:
    frame = pl.DataFrame({
        "avgMAE": [1.25, 2.0, None, 0.5, math.nan, 3.0, 4.0],
        "avgMAE_lo": [1.0, None, None, None, 0.1, None, 3.5],
        "avgMAE_hi": [1.5, None, None, None, 0.2, 2.0, None],
        "num_samples": [10, 1, 1, None, 0, 5, 1],
    })
    rows = list(frame.iter_rows(named=True))
    cells = ci_texts(frame, "avgMAE")
    assert cells == [with_ci(r, "avgMAE") for r in rows]
    assert cells[1].endswith(ONE_SAMPLE) and not cells[3].endswith(ONE_SAMPLE)  # one sample; no count
    assert ci_texts(frame.rename({"num_samples": "n"}), "avgMAE") == cells  # the count under its other name
    assert ci_texts(frame, "absent") == [with_ci(r, "absent") for r in rows]


def test_a_random_box_difference_is_marked_where_it_rests_on_one_sample() -> None:
    from medvision_bm.report.views import fmt, random_box_view

    table = pl.DataFrame({
        "label": ["a", "a", "a"], "task": ["t1", "t2", "ALL"], "num_samples": [1, 40, 1],
        "IoU": [0.5, 0.6, None], "IoU_lo": [None, 0.55, None], "IoU_hi": [None, 0.65, None],
        "random_iou": [0.1, 0.2, None], "iou_minus_random": [0.4, 0.4, None],
        "diff_lo": [None, 0.3, None], "diff_hi": [None, 0.5, None],
        "above_random": [True, True, None], "share_above_random": [1.0, 0.7, None],
    })
    view = random_box_view(table, 0.95)
    diff = [row[view.headers.index("IoU − random")] for row in view.rows]
    assert diff[0] == f"{fmt(0.4)} {ONE_SAMPLE}"  # one sample: no interval
    assert diff[1] == f"{fmt(0.4)} [{fmt(0.3)}, {fmt(0.5)}]"
    assert not diff[2].endswith(ONE_SAMPLE) and "[" in diff[2]  # no difference at all is not a one-sample value
