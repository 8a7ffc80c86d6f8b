"""A store whose parsed.jsonl is older than its answers (a run killed after answering more samples) is summarized
with the scanned parsed rows plus only the samples answered since, re-scored through the runner's path; the numbers
equal a full re-score of the store, and nothing else is scored again."""

from __future__ import annotations

import os

import pytest

from medvision_bm.models.base import GenResult, RequestError, SyncBackend
from medvision_bm.models.baselines import OracleBackend
from medvision_bm.models.registry import get_record
from medvision_bm.report.load import load
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config
from medvision_bm.score import store_scoring
from medvision_bm.score.rescore import rescore
from medvision_bm.store.discovery import discover
from mvtest_support import REPO
from phantom_runs import DirectRunner

pytestmark = pytest.mark.slow
TASKS = REPO / "tasks_list" / "tasks_MedVision-Phantom-AD.json"


class Backend(SyncBackend):
    """Answers like the oracle; fails the samples whose index is in ``fail``; a KeyboardInterrupt after
    ``stop_after`` answers (a run killed mid-task: its answers are in the store, its parsed.jsonl is not rewritten)."""

    name = "killable"

    def __init__(self, fail: frozenset[int] = frozenset(), stop_after: int | None = None) -> None:
        self.fail, self.stop_after, self.n = fail, stop_after, 0
        self._oracle = OracleBackend()

    def answer(self, request):
        if self.stop_after is not None and self.n >= self.stop_after:
            raise KeyboardInterrupt
        self.n += 1
        if request.rundoc.doc.index in self.fail:
            return GenResult(request.key, None, RequestError("http", "503 Service Unavailable", 503, True))
        return self._oracle.answer(request)


def _run(tmp_path, phantom_dir, backend, *extra: str) -> list:
    record = get_record("oracle")
    argv = ["--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS), "--results_dir",
            str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup", "--no_progress", *extra]
    cfg = build_config(build_parser(record, "test").parse_args(argv), record, argv)
    return DirectRunner(cfg, lambda cfg, data: backend).run()


def _by_key(rows) -> dict[str, tuple]:
    rows = [r.to_json() for r in rows]
    return {r["key"]: (r["status"], r["success"], tuple(sorted((r["metrics"] or {}).items()))) for r in rows}


def _loaded_by_key(loaded, store_id: int, family: str) -> dict[str, tuple]:
    from medvision_bm.tasks.scoring import SAMPLE_METRICS

    frame = loaded.samples[family].filter(loaded.samples[family]["store"] == store_id)
    return {r["key"]: (r["status"], r["success"], tuple(sorted((m, r[m]) for m in SAMPLE_METRICS[family])))
            for r in frame.iter_rows(named=True)}


@pytest.fixture()
def killed_store(tmp_path, phantom_dir, clean_env):
    """A finished run whose requests failed for 4 of 6 samples per task, then a rerun killed after two new answers
    (its segment ends in a torn line)."""
    _run(tmp_path, phantom_dir, Backend(frozenset({0, 1, 2, 3})), "--sample_limit", "6")
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, phantom_dir, Backend(stop_after=2), "--sample_limit", "6")
    refs, _ = discover(tmp_path / "res")
    stale = [r for r in refs if max(os.path.getmtime(s) for s in (r.folder / "samples").glob("*.jsonl"))
             > os.path.getmtime(r.folder / "parsed.jsonl")]
    assert len(stale) == 1, "the killed rerun left exactly one store with answers newer than its parsed.jsonl"
    seg = max(stale[0].folder.joinpath("samples").glob("*.jsonl"), key=os.path.getmtime)
    with open(seg, "ab") as fh:
        fh.write(b'{"key": "torn')  # the line the kill tore
    return refs, stale[0]


def test_a_killed_runs_store_is_brought_up_to_date_without_rescoring_the_rest(killed_store, monkeypatch):
    refs, stale = killed_store
    calls = []
    real = store_scoring.score_answer
    monkeypatch.setattr(store_scoring, "score_answer", lambda *a, **k: calls.append(a[0].key) or real(*a, **k))
    loaded = load(refs)
    info = next(s for s in loaded.stores if s.ref.folder == stale.folder)
    assert info.source == "parsed.jsonl + 2 newer answer(s) scored in memory", info.source
    assert len(calls) == 2, "only the two samples answered since the last parse are scored again"
    assert info.counts.bad_lines == 1 and info.counts.request_failed == 2 and info.counts.success == 4
    monkeypatch.setattr(store_scoring, "score_answer", real)
    full = rescore(stale)
    assert _loaded_by_key(loaded, info.id, stale.family) == _by_key(full.rows)
    assert (info.counts.selected, info.counts.answered, info.counts.success, info.counts.request_failed) == \
        (full.counts.selected, full.counts.answered, full.counts.success, full.counts.request_failed)
    assert any("newer than their parsed.jsonl" in n for n in loaded.notes)


def test_a_store_whose_docs_changed_since_the_parse_is_scored_in_full(killed_store):
    refs, stale = killed_store
    docs = stale.folder / "docs.jsonl"
    later = os.path.getmtime(max((stale.folder / "samples").glob("*.jsonl"), key=os.path.getmtime)) + 5
    os.utime(docs, (later, later))
    loaded = load(refs)
    info = next(s for s in loaded.stores if s.ref.folder == stale.folder)
    assert info.source == "re-scored in memory"
    assert _loaded_by_key(loaded, info.id, stale.family) == _by_key(rescore(stale).rows)


def test_doc_rows_are_found_by_bisection_or_else_by_a_search(killed_store, monkeypatch):
    from medvision_bm.score import refresh as refresh_module

    refs, stale = killed_store
    searched: list[str] = []
    real = refresh_module._lines_with
    monkeypatch.setattr(refresh_module, "_lines_with", lambda paths, keys: searched.extend(paths) or real(paths, keys))
    expected = _by_key(rescore(stale).rows)
    loaded = load(refs)
    info = next(s for s in loaded.stores if s.ref.folder == stale.folder)
    assert info.source.startswith("parsed.jsonl + 2 ")
    assert not [p for p in searched if p.endswith("docs.jsonl")], "docs.jsonl is bisected, not searched"
    assert not searched, "the samples that failed before and are answered now need no older record"
    # docs.jsonl in another order (another writer): the bisection gives up and the file is searched instead
    docs = stale.folder / "docs.jsonl"
    stamp = os.path.getmtime(docs)
    docs.write_text("".join(reversed(docs.read_text().splitlines(keepends=True))))
    os.utime(docs, (stamp, stamp))
    loaded = load(refs)
    info = next(s for s in loaded.stores if s.ref.folder == stale.folder)
    assert info.source.startswith("parsed.jsonl + 2 ") and any(p.endswith("docs.jsonl") for p in searched)
    assert _loaded_by_key(loaded, info.id, stale.family) == expected
