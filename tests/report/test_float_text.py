"""Floats spelled as ``repr`` spells them, many at once (report.float_text), and Markdown cells escaped per table
as ``md_cell`` escapes each (report.views.markdown)."""

from __future__ import annotations

import math

import numpy as np

from medvision_bm.report.float_text import float_reprs
from medvision_bm.report.views import View, markdown, md_cell


def test_float_reprs_equal_repr_across_magnitudes() -> None:
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.random(500) * 10.0 ** e for e in range(-25, 25)]
                            + [rng.standard_normal(500).astype(np.float32).astype(np.float64)])
    edges = [0.0, -0.0, 1e-4, 9.999999999999999e-05, 1e-3, 1e15, 1e16, 9999999999999998.0, 5e-324,
             1.7976931348623157e308, math.nan, math.inf, -math.inf, 0.1, 100.0, 2.0 ** 53]
    values = np.concatenate([values, -values, edges])
    assert float_reprs(values) == [repr(v) for v in values.tolist()]
    assert float_reprs([]) == []


def test_markdown_escapes_each_cell_as_md_cell() -> None:
    cells = ["a|b", "x](y", "<b>&", "line\nbreak\r", "`code` *em*", "back\\slash", "é", "", "]", "("]
    rows = [[cells[i], cells[(i + 3) % len(cells)]] for i in range(len(cells))]
    text = markdown(View("t", ["A", "B"], rows))
    expected = ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    assert text.splitlines()[-len(rows):] == expected
    odd = [["\x00", "\x01"], ["a", "b"]]  # the characters standing for borders meanwhile: escaped cell by cell
    assert markdown(View("t", ["A", "B"], odd)).splitlines()[-2:] == ["| \x00 | \x01 |", "| a | b |"]
