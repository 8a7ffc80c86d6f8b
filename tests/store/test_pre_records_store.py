"""Stores written by the code before the typed records (fixtures/pre_records, commit 2ffe82a) stay valid: their
signatures are what today's code computes, today's scoring gives their stored scores, summarize
reads them, and a rerun of the same command reuses every stored answer and asks only the failed ones."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from medvision_bm.models.baselines import OracleBackend
from medvision_bm.report.load import load
from medvision_bm.score.rescore import rescore
from medvision_bm.store.discovery import discover
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import ResultsRecord, SignatureRecord
from medvision_bm.store.signature import digest
from phantom_runs import run_baseline

PRE = Path(__file__).parent / "fixtures" / "pre_records"
#: The order the runner wrote a store's files in: a checkout gives them any modification times, and a summary
#: compares them (answers newer than parsed.jsonl are scored in memory)
WRITE_ORDER = ("signature.json", "docs.jsonl", "samples/*.jsonl", "parsed.jsonl", "results.json")


def _copy(dest: Path) -> Path:
    """The fixture stores copied to ``dest`` with their files' modification times in the order they were written."""
    shutil.copytree(PRE, dest)
    for n, folder in enumerate(sorted(dest.glob("*/*/*"))):
        for k, pattern in enumerate(WRITE_ORDER):
            for f in folder.glob(pattern):
                t = 1_700_000_000 + 100 * n + k
                os.utime(f, (t, t))
    return dest


def test_signatures_are_what_todays_code_computes():
    refs, _ = discover(PRE)
    assert len(refs) == 6
    for ref in refs:
        sig = SignatureRecord.read(StoreLayout(ref.folder).signature)
        assert digest(dict(sig.inputs)) == sig.answer_signature and ref.folder.name == sig.answer_signature[:12]
        assert ref.answer_signature == sig.answer_signature


def test_todays_scoring_gives_their_stored_scores_and_summarize_reads_them(tmp_path):
    refs, _ = discover(_copy(tmp_path / "results"))
    for ref in refs:
        files = StoreLayout(ref.folder)
        stored = ResultsRecord.read(files.results())
        res = rescore(ref)
        assert res.metrics == stored.metrics, ref.folder
        assert [r.to_json() for r in res.rows] == [json.loads(x) for x in files.parsed().read_text().splitlines()]
        assert res.counts.selected == stored.counts.selected and res.counts.answered == stored.counts.answered
    loaded = load(refs)
    assert sum(f.height for f in loaded.samples.values()) == 30
    by_model = {}
    for s in loaded.stores:
        by_model.setdefault(s.ref.model, []).append(s)
    assert [s.source for s in loaded.stores] == ["parsed.jsonl"] * 6
    assert sum(s.counts.request_failed for s in by_model["oracle"]) == 3
    assert sum(s.counts.request_failed for s in by_model["mean"]) == 0


def test_a_rerun_reuses_every_stored_answer_and_asks_only_the_failed(tmp_path, phantom_dir, phantom_lists):
    results = _copy(tmp_path / "results")
    tasks = {}
    for fam in ("detect", "TL", "AD"):
        tasks.update(list(json.loads((phantom_lists / f"tasks_MedVision-Phantom-{fam}.json").read_text()).items())[:1])
    assert set(tasks) == {p.name for p in (PRE / "oracle").iterdir()}
    tl = tmp_path / "tasks.json"
    tl.write_text(json.dumps(tasks))
    segments = sorted(p.relative_to(results) for p in results.glob("*/*/*/samples/*.jsonl"))
    before = {p: ResultsRecord.read(p).metrics for p in results.glob("mean/*/*/results.json")}
    mean = run_baseline("mean", "detect", phantom_dir, results, "--sample_limit", "5", lists=phantom_lists,
                        tasks_json=tl)
    assert [(o.state, o.n_asked) for o in mean] == [("done", 0)] * 3
    assert sorted(p.relative_to(results) for p in results.glob("*/*/*/samples/*.jsonl")) == segments
    assert {p: ResultsRecord.read(p).metrics for p in results.glob("mean/*/*/results.json")} == before
    # the same folders (today's answer signatures) and docs.jsonl as it was: today's doc rows and doc hashes are the
    # stored ones byte for byte (docs.jsonl is merged by the bytes of its rows)
    for docs in PRE.glob("*/*/*/docs.jsonl"):
        assert (results / docs.relative_to(PRE)).read_bytes() == docs.read_bytes()
    oracle = run_baseline("oracle", "detect", phantom_dir, results, "--sample_limit", "5", lists=phantom_lists,
                          tasks_json=tl, backend=lambda cfg, data: OracleBackend())
    assert [(o.state, o.n_asked) for o in oracle] == [("done", 1)] * 3  # the request that failed, nothing else
    for o in oracle:
        assert o.metrics["SuccessRate"] == 1.0 and o.metrics["n"] == 5
