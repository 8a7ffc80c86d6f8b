"""The one rule that says whether a store's parse is current: fresh, refreshable (answers appended since) or stale."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from medvision_bm.score.store_scoring import SCORING_VERSION, current_scoring
from medvision_bm.store.freshness import (
    ANSWERS_AFTER,
    Fresh,
    Refreshable,
    Stale,
    judged_parse_state,
    parse_state,
)
from medvision_bm.store.layout import JudgedLayout, StoreLayout
from medvision_bm.store.records import ResultsRecord
from medvision_bm.tasks.scoring import DEFAULT_METRIC_PATH, PARSERS

SECOND = 1_000_000_000


def _at(path: Path, t: int) -> None:
    os.utime(path, ns=(t * SECOND, t * SECOND))


def _results(files: StoreLayout, **changes: object) -> None:
    fields: dict[str, object] = {"parser_version": PARSERS[0], "metric_rules": "upstream", "scoring_version":
                                 SCORING_VERSION, "metric_path": DEFAULT_METRIC_PATH, **changes}
    ResultsRecord(**fields).write(files.results())  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> StoreLayout:
    """A store parsed after its docs and its one segment were written: docs at 100 s, answers at 200 s, the parse
    (parsed.jsonl, its index, results.json) at 300 s."""
    files = StoreLayout(tmp_path)
    files.samples.mkdir(parents=True)
    files.docs.write_bytes(b'{"key": "a"}\n')
    seg = files.samples / "w1.jsonl"
    seg.write_bytes(b'{"key": "a"}\n')
    files.parsed().write_bytes(b'{"key": "a"}\n')
    files.parsed_index().write_bytes(b"{}\n")
    _results(files)
    for path, t in ((files.docs, 100), (seg, 200), (files.parsed(), 300), (files.parsed_index(), 300),
                    (files.results(), 300)):
        _at(path, t)
    return files


def _state(files: StoreLayout) -> Fresh | Stale | Refreshable:
    return parse_state(files.folder, current_scoring)


def test_a_parse_of_the_current_answers_and_docs_under_this_scoring_is_fresh(store: StoreLayout) -> None:
    assert _state(store) == Fresh()


def test_an_answer_appended_after_the_parse_makes_it_refreshable_from_that_segment(store: StoreLayout) -> None:
    old, new = store.samples / "w1.jsonl", store.samples / "w2.jsonl"
    new.write_bytes(b'{"key": "b"}\n')
    _at(new, 400)
    state = _state(store)
    assert state == Refreshable(300 * SECOND)
    assert isinstance(state, Refreshable) and state.is_new(new) and not state.is_new(old)


def test_answers_written_in_the_tick_of_the_last_score_are_not_taken_for_scored(store: StoreLayout) -> None:
    # a coarse clock: the segment and results.json share a time, so the score may have come before the answers
    _at(store.parsed(), 200)
    _at(store.results(), 200)
    assert isinstance(_state(store), Refreshable)


def test_a_parse_older_than_its_answers_is_refreshable_even_when_results_json_is_newer(store: StoreLayout) -> None:
    # results.json alone does not vouch for parsed.jsonl: the rows are brought up to date from the newer segment
    _at(store.parsed(), 150)
    state = _state(store)
    assert state == Refreshable(150 * SECOND)


def test_edited_docs_make_the_parse_stale(store: StoreLayout) -> None:
    _at(store.docs, 400)
    state = _state(store)
    assert isinstance(state, Stale) and "docs.jsonl" in state.reason


@pytest.mark.parametrize("changes", [{"scoring_version": SCORING_VERSION - 1}, {"parser_version": "strict-0"},
                                     {"metric_path": "somewhere"}, {"metric_rules": None}])
def test_a_parse_under_another_scoring_is_stale(store: StoreLayout, changes: dict[str, object]) -> None:
    _results(store, **changes)
    _at(store.results(), 300)
    state = _state(store)
    assert isinstance(state, Stale) and "scoring" in state.reason


def test_a_parse_without_results_json_is_stale(store: StoreLayout) -> None:
    store.results().unlink()
    assert isinstance(_state(store), Stale)


def test_no_parsed_jsonl_is_stale(store: StoreLayout) -> None:
    store.parsed().unlink()
    assert _state(store) == Stale("no parsed.jsonl")


def test_a_missing_index_leaves_a_current_parse_fresh(store: StoreLayout) -> None:
    # the index is the scorer's cache of what each row was made from: without it the rows are still those of the
    # current answers (the next score re-scores the selection once to rebuild it)
    store.parsed_index().unlink()
    assert _state(store) == Fresh()


def test_a_torn_parsed_jsonl_is_stale(store: StoreLayout) -> None:
    store.parsed().write_bytes(b'{"key": "a"}\n{"key": "b", "sta')
    _at(store.parsed(), 300)
    state = _state(store)
    assert isinstance(state, Stale) and "parsed.jsonl" in state.reason


def test_answers_appended_to_a_legacy_store_make_it_stale_not_refreshable(store: StoreLayout) -> None:
    _results(store, legacy_store=True)
    _at(store.results(), 300)
    assert _state(store) == Fresh()
    _at(store.samples / "w1.jsonl", 400)
    assert isinstance(_state(store), Stale)


def test_results_read_already_are_used_as_given(store: StoreLayout) -> None:
    other = ResultsRecord.read(store.results())
    assert other is not None
    assert parse_state(store.folder, current_scoring, other, read_results=False) == Fresh()
    assert isinstance(parse_state(store.folder, current_scoring, None, read_results=False), Stale)


# --- a judged parse (judged/<sig12>/parsed.jsonl and results.json) is a parse of its store under the same rule


@pytest.fixture
def judged(store: StoreLayout) -> JudgedLayout:
    """A judged parse of the store's answers, written with the strict parse (at 300 s)."""
    files = JudgedLayout(store.judged / "0123456789ab")
    files.folder.mkdir(parents=True)
    files.parsed.write_bytes(b'{"key": "a"}\n')
    ResultsRecord.read(store.results()).write(files.results)  # type: ignore[union-attr]
    for path in (files.parsed, files.results):
        _at(path, 300)
    return files


def _judged_state(store: StoreLayout, judged: JudgedLayout) -> Fresh | Stale:
    return judged_parse_state(store.folder, judged.folder, current_scoring)


def test_a_judged_parse_of_the_current_answers_and_docs_is_fresh(store: StoreLayout, judged: JudgedLayout) -> None:
    assert _judged_state(store, judged) == Fresh()


def _edit_docs(store: StoreLayout, judged: JudgedLayout) -> None:
    _at(store.docs, 400)


def _tear_parse(store: StoreLayout, judged: JudgedLayout) -> None:
    for path in (store.parsed(), judged.parsed):
        path.write_bytes(b'{"key": "a"}\n{"key": "b", "sta')
        _at(path, 300)


def _remove_parse(store: StoreLayout, judged: JudgedLayout) -> None:
    store.parsed().unlink()
    judged.parsed.unlink()


def _other_scoring(store: StoreLayout, judged: JudgedLayout) -> None:
    _results(store, scoring_version=SCORING_VERSION - 1)
    ResultsRecord.read(store.results()).write(judged.results)  # type: ignore[union-attr]
    for path in (store.results(), judged.results):
        _at(path, 300)


@pytest.mark.parametrize("change", [_edit_docs, _tear_parse, _remove_parse, _other_scoring])
def test_a_stale_judged_parse_is_stale_for_the_strict_parses_reason(store: StoreLayout, judged: JudgedLayout,
                                                                    change) -> None:
    change(store, judged)
    strict, judged_state = _state(store), _judged_state(store, judged)
    assert isinstance(strict, Stale) and judged_state == strict


def test_answers_added_since_make_a_judged_parse_stale_where_the_strict_one_is_refreshable(
        store: StoreLayout, judged: JudgedLayout) -> None:
    new = store.samples / "w2.jsonl"
    new.write_bytes(b'{"key": "b"}\n')
    _at(new, 400)
    assert isinstance(_state(store), Refreshable)
    assert _judged_state(store, judged) == Stale(ANSWERS_AFTER)  # nothing refreshes a judged parse in memory


def test_a_judged_parse_reads_its_own_files_not_the_strict_parses(store: StoreLayout, judged: JudgedLayout) -> None:
    _at(judged.parsed, 150)  # judged before the answers of 200 s; the strict parse (300 s) is current
    assert _state(store) == Fresh() and _judged_state(store, judged) == Stale(ANSWERS_AFTER)
    _at(judged.parsed, 300)
    judged.results.unlink()
    _at(store.results(), 300)
    assert _state(store) == Fresh() and isinstance(_judged_state(store, judged), Stale)
