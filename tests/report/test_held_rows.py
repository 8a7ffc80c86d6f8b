"""What summarize takes from the rows load read, instead of reading or parsing the stores again, is what it read or
parsed before: the sample browser's parsed numbers, upstream's per-sample values files (and their text, built
column-wise), the CDA's proxy samples, the T/L filter's statuses."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest

from medvision_bm.report import cda
from medvision_bm.report.browser import build_cards, choose_samples
from medvision_bm.report.load import TARGET, VALUES, Loaded, load
from medvision_bm.report.removed_filter import FilterReport, FilterRow
from medvision_bm.report.upstream_summaries import dump_json
from medvision_bm.report.upstream_values import (
    _joined_file,
    joined_runs,
    run_values,
    run_values_text,
    with_value_texts,
)
from medvision_bm.store.discovery import discover
from medvision_bm.store.layout import StoreLayout


def _without_held(loaded: Loaded) -> Loaded:
    return dataclasses.replace(loaded, samples={f: fr.drop(VALUES, TARGET) for f, fr in loaded.samples.items()})


@pytest.fixture(scope="module")
def loaded(phantom_results: Path) -> Loaded:
    refs, _ = discover(phantom_results)
    return load(refs)


def test_the_frames_hold_each_rows_values_and_target(loaded: Loaded) -> None:
    for frame in loaded.samples.values():
        assert frame.schema[VALUES] == pl.List(pl.Float64) and frame.schema[TARGET] == pl.List(pl.Float64)
        assert frame.filter(pl.col("success"))[VALUES].null_count() == 0


def test_cards_draw_the_held_values_as_the_answers_parsed_again(loaded: Loaded, tmp_path: Path) -> None:
    chosen = choose_samples(loaded, 3, [], 0)
    held = build_cards(loaded, chosen, None, "", tmp_path / "a")
    again = build_cards(_without_held(loaded), chosen, None, "", tmp_path / "b")
    assert held and [c.key for c in held] == [c.key for c in again]
    for a, b in zip(held, again):
        assert [(r.label, r.status, r.raw, r.values, r.shapes) for r in a.answers] == \
               [(r.label, r.status, r.raw, r.values, r.shapes) for r in b.answers]
    assert any(r.values for c in held for r in c.answers)


@pytest.mark.parametrize("family", ["detect", "TL", "AD"])
def test_values_files_from_the_held_rows_equal_the_ones_scanned_again(loaded: Loaded, family: str) -> None:
    info = {s.id: s for s in loaded.stores}
    labels = dict(loaded.store_frame().select("store", "label").iter_rows())
    frame = loaded.samples[family]
    for label in sorted(set(labels.values())):
        rows = frame.filter(pl.col("store").replace_strict(labels, default=None) == label)
        if not rows.height:
            continue
        assert run_values(family, rows, info, {}) == run_values(family, rows.drop(VALUES, TARGET), info, {})


def test_a_key_held_twice_is_read_from_the_file(loaded: Loaded) -> None:
    """Two rows of one key in a store: the scan's last-row rule decides, as before (the held rows are not used)."""
    info = {s.id: s for s in loaded.stores}
    frame = loaded.samples["AD"]
    sid = int(frame["store"][0])
    rows = frame.filter((pl.col("store") == sid) & pl.col("scored"))
    doubled = pl.concat([rows, rows.head(1).with_columns(pl.lit([-1.0]).alias(VALUES))])
    once, twice = run_values("AD", rows, info, {}), run_values("AD", doubled, info, {})
    assert isinstance(once, list) and isinstance(twice, list)
    assert twice == [*once, once[0]]  # the file's numbers for the repeated key, never the frame's -1.0


def test_statuses_are_status_of_for_every_run_and_task() -> None:
    rows = [FilterRow(label=lb, task=t, dataset="d", planner_version="v", status=st, list_file="", listed=None,
                      n_before=2, removed=1)
            for lb, t, st in (("a", "t1", "filtered"), ("a", "t2", "no list"), ("b", "t1", "filtered"),
                              ("b", "t1", "filtered"), ("c", "t3", "no list"))]
    report = FilterReport(rows=rows)
    per_task, per_run = report.statuses()
    assert per_task == {(r.label, r.task): report.status_of(r.label, r.task) for r in rows}
    assert per_run == {r.label: report.status_of(r.label) for r in rows}
    assert per_run["a"].startswith("partly filtered (")


def test_segments_are_the_jsonl_entries_by_name_hidden_ones_too(tmp_path: Path) -> None:
    files = StoreLayout(tmp_path)
    assert files.segments() == [] and files.score_files() == []
    files.samples.mkdir()
    for name in ("b.jsonl", ".h.jsonl", "a.jsonl", "c.json", "a.JSONL"):
        (files.samples / name).write_text("")
    (files.samples / "d.jsonl").mkdir()
    assert files.segments() == sorted(files.samples.glob("*.jsonl"))
    assert [p.name for p in files.segments()] == [".h.jsonl", "a.jsonl", "b.jsonl", "d.jsonl"]


_ODD_VALUES = [[-0.0], [1e-07], [1e22, 0.1], [float("nan")], [float("inf"), -float("inf")], [None], [], None,
               [2.5, None], [123456789.123456789]]


@pytest.mark.parametrize("family", ["detect", "TL", "AD"])
@pytest.mark.parametrize("null_groups", [False, True])
def test_values_texts_written_column_wise_are_the_files_dumped(loaded: Loaded, family: str,
                                                               null_groups: bool) -> None:
    """The per-sample file's text joined from the column-wise pieces is ``json.dumps(run_values(...), indent=2)``
    to the character, odd numbers too: -0.0, tiny and huge floats, NaN, infinities, nulls, empty and missing
    answers; a sample without a group (A/D: its label null; elsewhere the file as run_values dumps it)."""
    info = {s.id: s for s in loaded.stores}
    labels = dict(loaded.store_frame().select("store", "label").iter_rows())
    frame = loaded.samples[family].with_columns(pl.col("store").replace_strict(labels, default=None).alias("label"))
    odd = pl.Series(VALUES, [_ODD_VALUES[i % len(_ODD_VALUES)] for i in range(frame.height)], dtype=pl.List(pl.Float64))
    frame = frame.with_columns(odd, *([pl.col("nMAE").fill_null(-0.0)] if "nMAE" in frame.columns else []))
    if null_groups:
        frame = frame.with_columns(pl.when(pl.int_range(pl.len()) % 7 == 3).then(None).otherwise(pl.col("group"))
                                   .alias("group"))
    texts = with_value_texts(family, frame, info, {})
    assert texts.height == frame.height
    every = joined_runs(family, texts, info)  # all runs at once: each as its own rows join
    for label in sorted(set(labels.values())):
        rows = texts.filter(pl.col("label") == label)
        if not rows.height:
            continue
        assert (_joined_file(family, rows, info) is None) == (null_groups and family != "AD")
        assert every.get(label) == _joined_file(family, rows, info)
        assert run_values_text(family, rows, info, {}) == dump_json(run_values(family, rows, info, {}))


def test_cda_from_the_held_rows_is_the_cda_of_the_parse_files(loaded: Loaded) -> None:
    """The clinical decision agreement takes a strict parse's proxy samples from the rows load read; the same
    samples, in the same order, with the same numbers and notes as read again from the parse files."""
    held, again = cda.analyse(loaded), cda.analyse(_without_held(loaded))
    assert not held.empty and held.notes == again.notes
    assert {f: [(r.label, r.samples) for r in runs] for f, runs in held.runs.items()} == \
           {f: [(r.label, r.samples) for r in runs] for f, runs in again.runs.items()}
    assert {f: [r.metrics() for r in runs] for f, runs in held.runs.items()} == \
           {f: [r.metrics() for r in runs] for f, runs in again.runs.items()}
