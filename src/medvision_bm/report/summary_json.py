"""summary.json's text: ``json.dumps(summary, sort_keys=True, ensure_ascii=False, allow_nan=False)`` to the
character, its table rows written column by column.

A table's rows stand in the summary as ``TableRows`` (a frame, not a dict per row): the summary's other values go
through ``json.dumps`` as before, each table in its place as a marker string, which is then replaced by the table's
text, built per column (each column's values spelled at once: floats by ``float_text.float_reprs``, strings by
``json``'s own escaper) and joined per row. Each row reads as its dict ``{column: value}`` with every value not
finite as null (``summarize.json_safe``) would read through ``json.dumps``; a value of another kind than a number,
text or boolean (a list, a struct) is dumped by ``json.dumps`` itself. Where a marker cannot be told apart from the
summary's own text, the summary is dumped the old way, each table as its list of row dicts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from medvision_bm.report.float_text import float_reprs

#: ``json.dumps``' settings for summary.json (besides the encoder of anything it does not know).
_SETTINGS: dict[str, Any] = {"sort_keys": True, "ensure_ascii": False, "allow_nan": False}
_ESCAPE: Callable[[str], str] = json.encoder.encode_basestring
#: A table's marker: ``json`` writes the NULs as ``\u0000``.
_MARK = "\x00table rows {}\x00"
_MARKED = re.compile(r'"\\u0000table rows (\d+)\\u0000"')


class TableRows:
    """A table's rows for summary.json: the frame, read column by column when the summary is written."""

    __slots__ = ("frame",)

    def __init__(self, frame: pl.DataFrame) -> None:
        self.frame = frame

    def dicts(self, safe: Callable[[Any], Any]) -> list[dict[str, Any]]:
        """The rows as dicts (``safe``: ``summarize.json_safe``), as the old summary held them."""
        names = self.frame.columns
        return [safe(dict(zip(names, values))) for values in zip(*(self.frame[c].to_list() for c in names))]


def _plain(o: object) -> object:
    """What ``json.dumps`` does with a value it does not know: the TypeError of ``JSONEncoder.default``."""
    return json.JSONEncoder().default(o)


def _column_texts(series: pl.Series, safe: Callable[[Any], Any]) -> list[str]:
    """The JSON text of each value of a column (not finite: null), as ``json.dumps`` writes it in a row."""
    dtype = series.dtype
    if dtype == pl.Null:
        return ["null"] * len(series)
    if dtype.is_float():
        values = series.cast(pl.Float64).to_numpy()
        texts = float_reprs(values)
        missing = ~np.isfinite(values)  # a null reads as NaN here
        if missing.any():
            for i in np.flatnonzero(missing).tolist():
                texts[i] = "null"
        return texts
    if dtype.is_integer():
        return series.cast(pl.Utf8).fill_null("null").to_list()
    if dtype == pl.Boolean:
        spelled = {True: "true", False: "false", None: "null"}
        return [spelled[v] for v in series.to_list()]
    if dtype == pl.Utf8:
        if series.null_count():
            return [_ESCAPE(v) if v is not None else "null" for v in series.to_list()]
        return list(map(_ESCAPE, series.to_list()))
    return [json.dumps(safe(v), **_SETTINGS) for v in series.to_list()]


def _table_text(frame: pl.DataFrame, safe: Callable[[Any], Any]) -> str:
    """``json.dumps`` of the table's rows as dicts, built from its columns (each row by one formatting of its
    keys' template with its values' texts)."""
    if frame.height == 0:
        return "[]"
    if not frame.width:
        return "[" + ", ".join(["{}"] * frame.height) + "]"
    names = sorted(frame.columns)  # sort_keys
    row = "{" + ", ".join(_ESCAPE(name).replace("%", "%%") + ": %s" for name in names) + "}"
    columns = [_column_texts(frame[name], safe) for name in names]
    return "[" + ", ".join([row % values for values in zip(*columns)]) + "]"


def dumps(summary: object, safe: Callable[[Any], Any]) -> str:
    """``json.dumps(summary, sort_keys=True, ensure_ascii=False, allow_nan=False)`` of a summary holding
    ``TableRows`` (each dumped as its ``dicts(safe)``), to the character."""
    tables: list[TableRows] = []

    def mark(o: object) -> object:
        if isinstance(o, TableRows):
            tables.append(o)
            return _MARK.format(len(tables) - 1)
        return _plain(o)

    text = json.dumps(summary, default=mark, **_SETTINGS)
    pieces = _MARKED.split(text)
    if len(pieces) == 2 * len(tables) + 1 and pieces[1::2] == [str(i) for i in range(len(tables))]:
        pieces[1::2] = [_table_text(t.frame, safe) for t in tables]
        return "".join(pieces)
    return json.dumps(summary, default=lambda o: o.dicts(safe) if isinstance(o, TableRows) else _plain(o),
                      **_SETTINGS)
