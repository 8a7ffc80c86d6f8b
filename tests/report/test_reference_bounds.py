"""A --reference file is read through the typed, bounded readers (medvision_bm.limits): a cell of the wrong type,
out of bounds or not finite, a file nested too deep, too large or not a regular file is one line naming the file
(and the row and column), never a traceback, a hang or a display of a million digits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medvision_bm import limits
from medvision_bm.errors import UserError
from medvision_bm.report.published import read_rows
from mvtest_support import plant_non_regular, user_error_of

GOOD = {"model": "m", "family": "TL", "group": "overall", "metric": "avgMAE", "value": 1.25, "n": 10, "decimals": 3}

HOSTILE = {
    "decimals of 10**8": ({"decimals": 10**8}, "column decimals"),
    "negative decimals": ({"decimals": -4}, "column decimals"),
    "a fraction of decimals": ({"decimals": 2.5}, "column decimals"),
    "n of 1e25": ({"n": 1e25}, "column n"),
    "n as Infinity": ({"n": float("inf")}, "column n"),
    "sample_limit of 10**400": ({"sample_limit": 10**400}, "column sample_limit"),
    "value as an object": ({"value": {"x": 1}}, "column value"),
    "value of -Infinity": ({"value": float("-inf")}, "column value"),
    "value as true": ({"value": True}, "column value"),
    "model as a number": ({"model": 7}, "column model"),
    "group as a list": ({"group": ["overall"]}, "column group"),
    "tl_filter as a number": ({"tl_filter": 3}, "column tl_filter"),
    "a note of 5,000 characters": ({"note": "n" * 5000}, "column note"),
}


def _one_line(exc: BaseException, path: Path) -> str:
    text = str(exc)
    assert "\n" not in text and str(path) in text and len(text) < 400, text
    return text


@pytest.mark.parametrize("cells,column", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_cell_is_one_line_naming_the_row_and_column(tmp_path, cells, column):
    path = tmp_path / "ref.json"
    path.write_text(json.dumps([GOOD, {**GOOD, **cells}]))
    with pytest.raises(UserError) as info:
        read_rows(path)
    assert f"row 2 {column}" in _one_line(info.value, path)


@pytest.mark.parametrize("cell", ["1e999", "Infinity", "12345678901234567890123"])
def test_a_csv_cell_out_of_bounds_is_one_line(tmp_path, cell):
    path = tmp_path / "ref.csv"
    path.write_text("model,family,group,metric,value,n,decimals\n"
                    f"m,TL,overall,avgMAE,{cell if cell != '12345678901234567890123' else 1},"
                    f"{cell if cell == '12345678901234567890123' else 3},2\n")
    with pytest.raises(UserError) as info:
        read_rows(path)
    assert "row 1 column" in _one_line(info.value, path)


def test_the_shown_precision_is_bounded_and_a_good_file_reads(tmp_path):
    path = tmp_path / "ref.json"
    path.write_text(json.dumps({"rows": [{**GOOD, "decimals": limits.MAX_DECIMALS, "n": "12", "value": "nan"}]}))
    (row,) = read_rows(path)
    assert (row.decimals, row.n, row.value) == (limits.MAX_DECIMALS, 12, None)


def test_a_file_nested_60000_deep_is_one_line(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 60_000 + "]" * 60_000)
    with pytest.raises(UserError) as info:
        read_rows(path)
    assert "nested" in _one_line(info.value, path)


def test_a_file_larger_than_its_bound_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "wb") as fh:  # sparse: nothing is written to disk
        fh.truncate(limits.MAX_REFERENCE_BYTES + 1)
    with pytest.raises(UserError) as info:
        read_rows(path)
    assert "over the" in _one_line(info.value, path)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_a_device_is_refused_without_waiting_or_reading(tmp_path, kind):
    path = tmp_path / "ref.json"
    plant_non_regular(path, kind)
    error = user_error_of(lambda: read_rows(path))
    assert error is not None and "not a regular file" in _one_line(error, path)
