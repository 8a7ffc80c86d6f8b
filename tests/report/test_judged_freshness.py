"""A judged parse is a parse of its store too: the summary of a judged load notes it as stale by the one freshness
rule of the strict parse (answers or docs written after it), with that rule's reason, and says nothing of a current
one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from medvision_bm.report.load import load_judged
from medvision_bm.score.store_scoring import current_scoring
from medvision_bm.store.discovery import StoreRef, discover
from medvision_bm.store.freshness import ANSWERS_AFTER, Stale, parse_state
from medvision_bm.store.layout import JudgedLayout, StoreLayout
from medvision_bm.store.records import JudgeFile
from phantom_runs import run_baseline

pytestmark = pytest.mark.slow
SIG = "0123456789abcdef"


@pytest.fixture()
def judged_store(phantom_dir: Path, phantom_lists: Path, tmp_path: Path, clean_env) -> StoreRef:
    """One A/D store of the oracle, with a judged parse written after its answers (the strict rows, as a judge
    that agrees with the strict parser everywhere writes them)."""
    outcomes = run_baseline("oracle", "AD", phantom_dir, tmp_path / "res", "--sample_limit", "3", lists=phantom_lists)
    assert outcomes and all(o.state == "done" for o in outcomes), outcomes
    ref = discover(tmp_path / "res")[0][0]
    files, judged = StoreLayout(ref.folder), JudgedLayout(StoreLayout(ref.folder).judged / SIG[:12])
    judged.folder.mkdir(parents=True)
    shutil.copyfile(files.parsed(), judged.parsed)
    shutil.copyfile(files.results(), judged.results)
    JudgeFile(SIG, {"judge_model": "j", "weights": "w/j"}).write(judged.judge_file)
    newest = max(os.stat(p).st_mtime_ns for p in (files.docs, *files.segments(), files.parsed(), files.results()))
    for path in (judged.parsed, judged.results):
        os.utime(path, ns=(newest + 1_000_000_000, newest + 1_000_000_000))
    return ref


def _stale_notes(ref: StoreRef) -> list[str]:
    loaded = load_judged([ref])
    assert [s.id for s in loaded.stores] == [0]  # a stale judged parse is still summarized, with its note
    return [n for n in loaded.notes if "is stale" in n]


def _later(path: Path, ref: StoreRef) -> None:
    judged = JudgedLayout(StoreLayout(ref.folder).judged / SIG[:12]).results
    t = os.stat(judged).st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(t, t))


def test_a_current_judged_parse_gets_no_note(judged_store: StoreRef) -> None:
    assert _stale_notes(judged_store) == []


def test_a_duplicate_answer_appended_after_the_judged_parse_makes_it_stale(judged_store: StoreRef) -> None:
    seg = StoreLayout(judged_store.folder).segments()[0]
    with open(seg, "rb+") as fh:
        first = fh.readline()
        fh.seek(0, os.SEEK_END)
        fh.write(first)  # the same answer again: the strict parse's rows stand, the judged parse is older
    _later(seg, judged_store)
    assert _stale_notes(judged_store) == [f"store {judged_store.folder}: its judged parse {SIG[:12]} is stale "
                                          f"({ANSWERS_AFTER}); rerun `medvision-bm judge`"]


def test_docs_written_after_the_judged_parse_make_it_stale_for_the_strict_parses_reason(
        judged_store: StoreRef) -> None:
    _later(StoreLayout(judged_store.folder).docs, judged_store)
    strict = parse_state(judged_store.folder, current_scoring)
    assert isinstance(strict, Stale)
    assert _stale_notes(judged_store) == [f"store {judged_store.folder}: its judged parse {SIG[:12]} is stale "
                                          f"({strict.reason}); rerun `medvision-bm judge`"]
