"""A run's finish leaves its store's parse fresh by the one freshness rule: a run whose only new answer lines repeat
answers the parse holds already (a duplicate line) finds every row current, keeps parsed.jsonl's bytes and dates it
to the answers it read, so a summary takes the parse as it is instead of scoring the newer segment in memory on
every run; an answer the finish did not read is never covered by that date."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from medvision_bm.report import load as load_mod
from medvision_bm.report.load import load
from medvision_bm.score.store_scoring import current_scoring
from medvision_bm.store.discovery import StoreRef, discover
from medvision_bm.store.freshness import Fresh, Refreshable, parse_state, segments_read_ns
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.samples import SampleStore
from phantom_runs import run_baseline

pytestmark = pytest.mark.slow


def _run(phantom_dir: Path, lists: Path, results: Path) -> StoreRef:
    outcomes = run_baseline("oracle", "AD", phantom_dir, results, "--sample_limit", "3", lists=lists)
    assert outcomes and all(o.state == "done" for o in outcomes), outcomes
    refs, _ = discover(results)
    return refs[0]


def _append_duplicate(ref: StoreRef) -> Path:
    """A concurrent run's copy of an answer the store holds: the same line again, written just after the parse
    (a millisecond: the rerun's own files are written later still)."""
    files = StoreLayout(ref.folder)
    seg = files.segments()[0]
    with open(seg, "rb") as fh:
        first = fh.readline()
    with open(seg, "ab") as fh:
        fh.write(first)
    t = max(os.stat(p).st_mtime_ns for p in (files.parsed(), files.results())) + 1_000_000
    os.utime(seg, ns=(t, t))
    return seg


def test_a_rerun_that_finds_only_a_duplicate_answer_leaves_the_parse_fresh(phantom_dir: Path, phantom_lists: Path,
                                                                           tmp_path: Path, clean_env,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ref = _run(phantom_dir, phantom_lists, tmp_path / "res")
    files = StoreLayout(ref.folder)
    assert parse_state(ref.folder, current_scoring) == Fresh()
    _append_duplicate(ref)
    assert isinstance(parse_state(ref.folder, current_scoring), Refreshable)
    before = files.parsed().read_bytes()
    ref = _run(phantom_dir, phantom_lists, tmp_path / "res")  # asks nothing: every sample is answered
    assert files.parsed().read_bytes() == before  # the rows stand: nothing was rewritten
    assert parse_state(ref.folder, current_scoring) == Fresh()

    def no_refresh(*a, **k):
        raise AssertionError("a fresh store's answers were scored again in memory")

    monkeypatch.setattr(load_mod, "refresh_stores", no_refresh)
    monkeypatch.setattr(load_mod, "rescore", no_refresh)
    loaded = load([ref])
    assert [s.source for s in loaded.stores] == ["parsed.jsonl"]
    assert not [n for n in loaded.notes if "in memory" in n]


def test_a_segment_grown_past_what_was_read_gets_no_date(phantom_dir: Path, phantom_lists: Path, tmp_path: Path,
                                                         clean_env) -> None:
    ref = _run(phantom_dir, phantom_lists, tmp_path / "res")
    state = SampleStore(ref.folder, ref.answer_signature).read()
    newest = max(os.stat(s).st_mtime_ns for s in StoreLayout(ref.folder).segments())
    assert segments_read_ns(ref.folder, state.offsets) == newest
    seg = _append_duplicate(ref)  # written after the state was read
    assert segments_read_ns(ref.folder, state.offsets) is None
    assert segments_read_ns(ref.folder, {**state.offsets, seg.name: state.offsets[seg.name] + 1}) is None
    assert segments_read_ns(ref.folder, {}) is None  # a segment never read
