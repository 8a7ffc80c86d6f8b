"""summary.json's text with the tables' rows written column by column (report.summary_json): the text
``json.dumps`` gives of the same summary holding each table as its list of ``json_safe`` row dicts."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest

from medvision_bm.report import summary_json as sj
from medvision_bm.report.summarize import json_safe

_SETTINGS = {"sort_keys": True, "ensure_ascii": False, "allow_nan": False}


def _old(summary: object) -> str:
    """The summary dumped as before: each table as its row dicts."""
    def plain(obj: object) -> object:
        if isinstance(obj, sj.TableRows):
            return obj.dicts(json_safe)
        raise TypeError(type(obj).__name__)

    return json.dumps(summary, default=plain, **_SETTINGS)


def _frame() -> pl.DataFrame:
    return pl.DataFrame({
        "zeta": [1.5, math.nan, None, math.inf, -0.0, 1e-7, 1e17, 0.1],
        "alpha": ["a", "é\n\"", None, "\x00table rows 0\x00", "", "x", "y", "z"],
        "n": [1, None, 3, -4, 2**40, 0, 7, 8],
        "ok": [True, False, None, True, True, False, True, False],
        "f32": pl.Series([0.1, 1.0, None, 2.5, 3.0, 4.0, 5.0, 6.0], dtype=pl.Float32),
        "items": [[1.0, math.nan], None, [], [2.0], [3.0], [4.0], [5.0], [6.0]],
        "none": [None] * 8,
    })


def test_dumps_equals_the_row_dicts_dump(monkeypatch: pytest.MonkeyPatch) -> None:
    frame = _frame()
    summary = {"b": sj.TableRows(frame), "a": {"rows": sj.TableRows(frame.head(0)), "x": [1, 2.5, "s"]},
               "c": [sj.TableRows(frame.select("n")), sj.TableRows(frame.select([]))], "note": "\x00table rows\x00"}
    built: list[int] = []
    table_text = sj._table_text
    monkeypatch.setattr(sj, "_table_text", lambda f, safe: built.append(f.height) or table_text(f, safe))
    assert sj.dumps(summary, json_safe) == _old(summary)
    assert built == [0, 8, 8, 0]  # each table built from its columns (in the sorted keys' order)


def test_dumps_falls_back_where_a_marker_is_the_summary_s_own_text() -> None:
    frame = _frame()
    summary = {"a": "\x00table rows 0\x00", "b": sj.TableRows(frame)}  # the text of the first table's marker
    assert sj.dumps(summary, json_safe) == _old(summary)


def test_dumps_refuses_what_json_refuses() -> None:
    with pytest.raises(TypeError):
        sj.dumps({"a": object()}, json_safe)
    with pytest.raises(ValueError):
        sj.dumps({"a": math.nan}, json_safe)
