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
