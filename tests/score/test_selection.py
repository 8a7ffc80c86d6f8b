"""The store's selection read without holding its docs (``score.rescore.docs_file_selection``) is the selection the
whole-store reading (``store_docs``) makes, in the same order, with the same keys and doc hashes; a store that needs
the whole-store reading (a key written twice, an edited row, rows missing) is handed to it. The task metrics built one
row at a time equal those of the held rows, and a judged parse written from a generator equals one written from a
list."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import orjson
import pytest

from medvision_bm.score.follow import ListSelection
from medvision_bm.score.judged import write_judged_parse
from medvision_bm.score.rescore import docs_file_selection, store_docs
from medvision_bm.store.discovery import discover
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.packed import PackedTexts
from medvision_bm.store.records import ParsedRow, iter_lines
from medvision_bm.tasks.scoring import ColumnsBuilder, ScoreColumns, aggregate_columns, aggregate_rows

TASK = "PhantomCT_BoxCoordinate_Task01_Axial"


def _ref(results: Path, model: str = "oracle", task: str = TASK):
    return next(r for r in discover(results)[0] if r.model == model and r.task == task)


def test_the_streamed_selection_is_the_held_one(results_copy: Path) -> None:
    ref = _ref(results_copy)
    sel = docs_file_selection(ref)
    held = store_docs(ref)
    assert sel is not None and sel.protocol == held.protocol
    assert list(sel.keys) == [r.key for r in held.chosen]
    assert list(sel.shas) == [str(r.doc_sha) for r in held.chosen]
    positions = [0, len(sel) // 2, len(sel) - 1]
    streamed = [rd.doc for rd in sel.rundocs(positions)]
    assert streamed == [held.rundocs[p].doc for p in positions]
    assert sel.rundoc(positions[1]).view == held.rundocs[positions[1]].view  # random access after a pass
    sel.close()


def test_a_shuffled_docs_file_gives_the_same_selection_order(results_copy: Path) -> None:
    ref = _ref(results_copy)
    before = list(docs_file_selection(ref).keys)  # type: ignore[union-attr]
    docs = StoreLayout(ref.folder).docs
    lines = docs.read_bytes().splitlines()
    random.Random(3).shuffle(lines)
    docs.write_bytes(b"\n".join(lines) + b"\n")  # same rows (same sums), another order
    assert list(docs_file_selection(ref).keys) == before  # type: ignore[union-attr]


@pytest.mark.parametrize("damage", ["duplicate", "edited", "missing"])
def test_a_store_the_streamed_reading_cannot_vouch_for_goes_to_the_whole_store_reading(results_copy: Path,
                                                                                       damage: str) -> None:
    ref = _ref(results_copy)
    docs = StoreLayout(ref.folder).docs
    lines = docs.read_bytes().splitlines()
    if damage == "duplicate":
        lines.append(lines[0])
    elif damage == "edited":
        row = orjson.loads(lines[1])
        row["doc"]["slice_idx"] += 1
        lines[1] = orjson.dumps(row)
    else:
        lines = lines[1:]
    docs.write_bytes(b"\n".join(lines) + b"\n")
    assert docs_file_selection(ref) is None


def test_packed_texts_read_back_what_was_packed() -> None:
    texts = ["a", "", "é/key:s1", "x" * 300]
    packed = PackedTexts(texts)
    assert list(packed) == texts and len(packed) == 4 and packed[-1] == texts[-1] and packed[1:3] == texts[1:3]
    assert list(packed.take([3, 0])) == [texts[3], texts[0]]
    with pytest.raises(IndexError):
        packed[4]
    buf, ends = packed.buffers()  # as a saved selection keeps them
    assert list(PackedTexts.of_buffers(buf, ends)) == texts
    for bad in (ends[:-1], np.array([5, 3, 4, ends[-1]]), np.array([-1, 1, 2, ends[-1]])):
        with pytest.raises(ValueError):
            PackedTexts.of_buffers(buf, bad)  # offsets that do not describe the buffer: a damaged file
    assert list(PackedTexts.of_buffers(np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int64))) == []


def test_metrics_built_row_by_row_equal_the_held_rows(results_copy: Path) -> None:
    ref = _ref(results_copy, "random-box")
    rows = [r.to_json() for r in iter_lines(StoreLayout(ref.folder).parsed(), ParsedRow.from_json)]
    cols = ColumnsBuilder("detect")
    for r in rows:
        cols.add(r)
    built, held = cols.columns(), ScoreColumns.of_rows("detect", rows)
    for name in ("status", "success", "near_zero"):
        assert (getattr(built, name) == getattr(held, name)).all()
    assert built.metrics.shape == held.metrics.shape
    assert json.dumps(aggregate_columns("detect", built, "newer")) == json.dumps(aggregate_rows("detect", rows, "newer"))


def test_a_judged_parse_written_from_a_generator_equals_one_from_a_list(results_copy: Path, tmp_path: Path) -> None:
    ref = _ref(results_copy, "random-box")
    rows = list(iter_lines(StoreLayout(ref.folder).parsed(), ParsedRow.from_json))
    counts: dict = {}

    def made():
        yield from rows
        counts["selected"] = len(rows)  # filled when the last row is made

    a, b = tmp_path / "a", tmp_path / "b"
    out_a = write_judged_parse(a, ref, "current", "newer", rows, {"selected": len(rows)}, "sig", {}, complete=True)
    out_b = write_judged_parse(b, ref, "current", "newer", made(), counts, "sig", {},
                               complete=lambda: counts["selected"] == len(rows))
    assert (a / "parsed.jsonl").read_bytes() == (b / "parsed.jsonl").read_bytes()
    assert out_a.metrics == out_b.metrics and out_b.counts is not None
    assert out_b.counts.to_json() == {"selected": len(rows)} and out_b.complete


def test_a_held_list_selection_reads_by_position() -> None:
    class _Rd:
        def __init__(self, key: str) -> None:
            self.doc = type("D", (), {"key": key})()

    items = [_Rd("a"), _Rd("b")]
    sel = ListSelection(items, {"a": "1", "b": "2"})  # type: ignore[arg-type]
    assert sel.keys == ["a", "b"] and sel.shas == ["1", "2"] and sel.rundoc(1) is items[1]
